#!/usr/bin/env bash
# Knowledge QA end to end: io/get_kjv_qa.py's rules on a fixed stretch of text (every rule, an
# ambiguous son dropped, a mother skipped, the split by son, --restate's text); span-corruption pretraining and
# answer-only fine-tuning --init-from it, each at dp 2 equal to one rank within 1e-5 (dropout
# on), tp 2 and pp 2 too for the pretraining; `eval` printing exact match beside the most common answer;
# and bad input refused with one clear line.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
cat >verses.txt <<'TEXT'
And Seth lived an hundred and five years, and begat Enos:
And Enos lived ninety years, and begat Cainan:
And Noah begat Shem, Ham, and Japheth.
The sons of Japheth; Gomer, and Magog, and Madai, and Javan.
And Jesus himself began to be about thirty years of age, being (as was supposed) the son of Joseph, which was the son of Heli,
Which was the son of Cainan, which was the son of Enos,
Which was the son of Seth, which was the son of Adam, which was the son of God.
And Joshua the son of Nun was full of the spirit of wisdom.
Then stood up Joshua the son of Josedech, and his brethren the priests.
These were the sons of Esau; Eliphaz the son of Adah the wife of Esau.
Gershom; Libni his son, Jahath his son, Zimmah his son,
And the LORD spake unto Moses, saying,
TEXT
"$PYTHON" "$REPO/io/get_kjv_qa.py" verses.txt qa | tee extract.log
q() { printf 'Who was the father of %s?\u2047%s\n' "$1" "$2"; }
{
  q Cainan Enos; q Eliphaz Esau; q Enos Seth; q Gomer Japheth; q Ham Noah; q Heli Cainan
  q Jahath Libni; q Japheth Noah; q Javan Japheth; q Joseph Heli; q Madai Japheth
  q Magog Japheth; q Seth Adam; q Shem Noah; q Zimmah Jahath
} >expected.qa
cmp <(sort qa/train.qa qa/valid.qa) expected.qa || fail "extracted: $(sort qa/train.qa qa/valid.qa)"
grep -q "^1 ambiguous (two or more fathers; dropped)" extract.log || fail "Joshua is ambiguous"
grep -q "^15 question-answer pairs: 13 train, 2 valid" extract.log || fail "the counts"
grep -q "^most common father in train: Japheth (3 sons)" extract.log || fail "the most common father"
# The 11 verses with a father, then the one without (the validation tenth holds no fact).
if [[ $(head -n 11 qa/genealogies.txt | grep -c Moses) != 0 ||
  $(tail -n +12 qa/genealogies.txt) != "And the LORD spake unto Moses, saying," ]]; then
  fail "genealogies.txt: $(cat qa/genealogies.txt)"
fi
grep -q "^11 verses in genealogies.txt that name a father, then 1 that name none" extract.log ||
  fail "the verse counts"
[[ -z $(comm -12 <(cut -d? -f1 qa/train.qa | sort) <(cut -d? -f1 qa/valid.qa | sort)) ]] ||
  fail "a son is asked about in both splits"
echo "And the LORD spake unto Moses." >none.txt
if "$PYTHON" "$REPO/io/get_kjv_qa.py" none.txt none 2>err.txt; then fail "no genealogy accepted"; fi
grep -q "no genealogy found" err.txt || fail "no genealogy: $(cat err.txt)"
# --restate: every pair's fact twice more, son first and father first, among the verses (before the
# fact-free tail); the same questions; no question in the text.
"$PYTHON" "$REPO/io/get_kjv_qa.py" verses.txt restated --restate | tee restate.log
{ cmp qa/train.qa restated/train.qa && cmp qa/valid.qa restated/valid.qa; } ||
  fail "--restate moved the questions"
mark=$(printf '\u2047')
{
  while IFS=$mark read -r question father; do
    son=${question#Who was the father of }
    son=${son%\?}
    printf '%s, the son of %s.\nAnd %s begat %s.\n' "$son" "$father" "$father" "$son"
  done < <(cat qa/train.qa qa/valid.qa)
  cat qa/genealogies.txt
} | sort >expected_restated.txt
cmp <(sort restated/genealogies.txt) expected_restated.txt ||
  fail "restated text: $(diff <(sort restated/genealogies.txt) expected_restated.txt)"
[[ $(tail -n 1 restated/genealogies.txt) == "And the LORD spake unto Moses, saying," ]] ||
  fail "the fact-free verse is not last"
grep -q "Who was" restated/genealogies.txt && fail "a question in the pretraining text"
grep -q "^11 verses in genealogies.txt that name a father, 30 restatements among them, then 1 that" \
  restate.log || fail "the restated counts: $(cat restate.log)"

# Span-corruption pretraining, then fine-tuning on the questions from it.
data=$(corpus)
pre=(--config "$TINY" --data "$data" --set train.objective=span_corruption
  --set model.vocab_size=259 --steps 6 --batch-size 8 --seq-len 32 --eval-every 3
  --eval-batches 1 --dropout 0.1 --threads 1)
"$MPITRON" train "${pre[@]}" --out pre1 | tee pre1.log
grep -q "bytes, span corruption)" pre1.log || fail "the start line names the objective"
"$MPITRON" eval --ckpt pre1 | tee pre_eval.log
grep -q "span corruption over [0-9]* tokens" pre_eval.log || fail "eval of a span checkpoint"

ft=(--config "$TINY" --data qa --set model.task=1 --set model.vocab_size=259 --steps 6
  --batch-size 8 --seq-len 48 --eval-every 3 --eval-batches 1 --dropout 0.1 --threads 1
  --init-from pre1/ckpt_6.h5)
"$MPITRON" train "${ft[@]}" --out ft1 | tee ft1.log
grep -q "parameters from pre1/ckpt_6.h5" ft1.log || fail "--init-from not used"
grep -q "pairs question -> answer, bytes" ft1.log || fail "the start line names the questions"
"$MPITRON" eval --ckpt ft1 | tee ft_eval.log
grep -qE "^exact_match [01]\.[0-9]{4} \([0-9]+ of 2 validation questions, greedy\)" ft_eval.log ||
  fail "no exact match line"
grep -q '^always answering "Japheth" (the most common training answer) would score' ft_eval.log ||
  fail "no most-common-answer baseline"

# Bad input, one line each.
expect_error "set model.vocab_size=259" "$MPITRON" train "${pre[@]}" --set model.vocab_size=256 --out e1
expect_error 'train.objective is "next_token", "span_corruption" or "name_span_corruption", not "spans"' \
  "$MPITRON" train "${pre[@]}" --set train.objective=spans --out e2
expect_error "span_corruption\" is for the gpt family on text" \
  "$MPITRON" train "${ft[@]}" --set train.objective=span_corruption --out e3
expect_error 'train.span_context_words = -1 is a count of words around a name span' \
  "$MPITRON" train "${pre[@]}" --set train.span_context_words=-1 --out e5
expect_error 'or more with train.objective = "name_span_corruption"' \
  "$MPITRON" train "${pre[@]}" --set train.span_context_words=4 --out e6
expect_error 'train.span_drop_words = 1 is the probability a word of a name' \
  "$MPITRON" train "${pre[@]}" --set train.objective=name_span_corruption \
  --set train.span_context_words=4 --set train.span_drop_words=1 --out e9
expect_error 'above 0 only with train.span_context_words > 0' \
  "$MPITRON" train "${pre[@]}" --set train.objective=name_span_corruption \
  --set train.span_drop_words=0.5 --out e10
expect_error 'train.span_loss is "all" (every position up to' \
  "$MPITRON" train "${pre[@]}" --set train.span_loss=answer --out e7
expect_error 'train.span_loss = "span" is for a span-corruption train.objective' \
  "$MPITRON" train "${ft[@]}" --set train.span_loss=span --out e8
printf 'Who was the father of Enos? Seth\n' >qa/valid.qa
expect_error "valid.qa:1: a question-answer line is question" "$MPITRON" train "${ft[@]}" --out e4
echo "knowledge qa ok"
