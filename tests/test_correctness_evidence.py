"""Correctness on whatever evidence an engine can give (no real engine: a small fake OpenAI server).

- The path is chosen from the adapter's ``can_give``: an adapter without logprobs/token ids gets the
  greedy-text check, and no request carries a field the adapter says the engine rejects.
- Greedy text is compared as token sequences under the model's tokenizer: identical outputs pass a
  lossless check, a changed one fails it and names the first divergence and the matched prefix; a
  lossy change is judged on the matched prefix and always flagged for review.
- A missing optional API never makes the reference unusable: logprobs that 422 fall back to greedy
  text, a missing /v1/completions route falls back to chat, and an engine that answers nothing gives
  a reference with evidence "none" whose checks say "NOT checked", never "checked".
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from research.correctness import (
    CorrectnessThresholds,
    ReferenceOutputs,
    capture_reference,
    check_candidate,
    compare_greedy_text,
    evidence_for,
    judge_greedy_text,
)

PROMPTS = ("alpha beta", "gamma delta", "epsilon")
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "one", "two", "three", "four", "five", "six", "x", "y"]
NO_LOGPROBS_REJECTS = frozenset({"logprobs", "top_logprobs", "stream_options", "return_token_ids", "prompt_logprobs"})


class FakeAdapter:
    """Just what correctness asks of an engine adapter."""

    kind = "fake"
    spec = None

    def __init__(self, evidence: frozenset[str], rejected: frozenset[str] = frozenset()):
        self.evidence = evidence
        self.rejected_request_fields = rejected

    def can_give(self, what: str) -> bool:
        return what in self.evidence


class FakeEngine:
    """An OpenAI-shaped server: greedy output = a fixed word list per prompt (``outputs``), 422 for
    fields in ``rejects`` (as transformers serve does), 404 for routes in ``missing``."""

    def __init__(self, outputs: dict[str, str], rejects=frozenset(), missing=frozenset()):
        self.outputs, self.rejects, self.missing = outputs, set(rejects), set(missing)
        self.bodies: list[tuple[str, dict]] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.bodies.append((self.path, body))
                if self.path in engine.missing:
                    return self._send(404, {"detail": "Not Found"})
                bad = engine.rejects & set(body)
                if bad:
                    return self._send(422, {"detail": f"Unexpected fields in the request: {bad}"})
                if self.path == "/v1/completions":
                    text = engine.outputs[body["prompt"]]
                    return self._send(200, {"choices": [{"index": 0, "text": text}]})
                if self.path == "/v1/chat/completions":
                    text = engine.outputs[body["messages"][-1]["content"]]
                    return self._send(
                        200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
                    )
                return self._send(404, {"detail": "Not Found"})

            def _send(self, status: int, obj: dict):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tokenizer_dir(tmp_path: Path) -> Path:
    """A word-level tokenizer.json (the model's tokenizer stand-in)."""
    vocab = {w: i for i, w in enumerate(["[UNK]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


BASE = {"alpha beta": " one two three four", "gamma delta": " five six one two", "epsilon": " x y x y"}


@pytest.fixture
def engine_factory():
    made = []

    def make(outputs=BASE, **kw) -> FakeEngine:
        e = FakeEngine(dict(outputs), **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def test_evidence_is_chosen_from_what_the_adapter_can_give():
    assert evidence_for(FakeAdapter(frozenset({"logprobs", "token_ids"}))) == "logprobs"
    assert evidence_for(FakeAdapter(frozenset({"logprobs"}))) == "greedy_text"  # logprobs need the ids too
    assert evidence_for(FakeAdapter(frozenset())) == "greedy_text"
    from engines.registry import adapter_class

    assert evidence_for(adapter_class("transformers")) == "greedy_text"
    assert evidence_for(adapter_class("vllm")) == "logprobs"


def test_greedy_text_comparison_finds_the_first_divergence_and_the_matched_prefix():
    same = compare_greedy_text(0, [1, 2, 3, 4], "a", [1, 2, 3, 4], "a")
    assert same.identical and same.first_divergence is None and same.matched_prefix == 4
    changed = compare_greedy_text(1, [1, 2, 3, 4], "a", [1, 2, 9, 4], "b")
    assert not changed.identical and changed.first_divergence == 2 and changed.matched_prefix == 2
    assert changed.divergence_is_tie is None  # no distributions: a tie cannot be told
    shorter = compare_greedy_text(2, [1, 2, 3], "a", [1, 2], "b")
    assert not shorter.identical and shorter.first_divergence == 2 and shorter.reference_length == 3


def _ref(n: int = 2) -> ReferenceOutputs:
    return ReferenceOutputs(
        engine_args=[], float32=True, top_k=0, max_tokens=4, sequences=[], evidence="greedy_text", tokenizer="tok"
    )


def test_greedy_text_judging_lossless_and_lossy():
    same = [compare_greedy_text(i, [1, 2, 3, 4], "", [1, 2, 3, 4], "") for i in range(2)]
    ok = judge_greedy_text(_ref(), [], same, lossy=False)
    assert ok.passed and ok.lossless_equivalent and ok.checked and ok.evidence == "greedy_text"
    assert ok.distribution is None and not ok.flag_for_review
    assert "greedy text" in ok.summary() and "checked on greedy text" in ok.label
    one_off = [same[0], compare_greedy_text(1, [1, 2, 3, 4], "", [1, 2, 3, 9], "")]
    bad = judge_greedy_text(_ref(), [], one_off, lossy=False)
    assert not bad.passed and "CHANGED" in bad.reason and "prompt 1 at token 3" in bad.reason
    lossy = judge_greedy_text(_ref(), [], one_off, lossy=True)
    assert lossy.passed and lossy.flag_for_review and lossy.mode == "lossy"
    assert lossy.mean_matched_prefix_fraction == pytest.approx((1.0 + 0.75) / 2)
    early = [compare_greedy_text(i, [1, 2, 3, 4], "", [9, 2, 3, 4], "") for i in range(2)]
    broken = judge_greedy_text(_ref(), [], early, lossy=True)
    assert not broken.passed and "BELOW" in broken.reason and broken.flag_for_review


def test_greedy_text_with_nothing_to_compare_or_a_baseline_that_disagrees_with_itself_never_passes():
    """Empty reference outputs (a reasoning model thinking through its tokens), no prompts at all, and a
    baseline whose batched outputs agree with its solo ones on almost nothing: no lossless pass."""
    empty = [compare_greedy_text(i, [], "", [], "") for i in range(3)]
    for lossy in (False, True):
        report = judge_greedy_text(_ref(), [], empty, lossy=lossy)
        assert not report.passed and not report.checked and "all empty" in report.reason
        assert not judge_greedy_text(_ref(), [], [], lossy=lossy).passed
    changed = [compare_greedy_text(0, [1, 2, 3, 4], "", [1, 9, 9, 9], "")]
    noisy = judge_greedy_text(_ref(), [], changed, lossy=False, self_fraction=0.0)  # an empty batched output
    assert not noisy.passed and "too noisy a bar" in noisy.reason
    within = judge_greedy_text(
        _ref(), [], [compare_greedy_text(0, [1, 2, 3, 4], "", [1, 2, 3, 9], "")], lossy=False, self_fraction=0.7
    )
    assert within.passed and within.flag_for_review  # 75% agreement against the baseline's own 70%


def test_an_engine_without_logprobs_is_checked_on_greedy_text_and_never_sent_rejected_fields(
    engine_factory, tokenizer_dir: Path
):
    adapter = FakeAdapter(frozenset(), NO_LOGPROBS_REJECTS | {"seed"})
    base = engine_factory(rejects=NO_LOGPROBS_REJECTS | {"seed"})
    ref = capture_reference(
        base.url, "m", ["--dtype", "float32"], prompts=PROMPTS, adapter=adapter, tokenizer=tokenizer_dir
    )
    assert ref.evidence == "greedy_text" and ref.route == "completions" and ref.tokenizer == str(tokenizer_dir)
    assert ref.unit == "tokens" and "gives no token ids" in (ref.note or "")
    assert ref.sequences[0].output_ids == [6, 7, 8, 9]  # " one two three four" under the word-level tokenizer
    assert all(not (set(b) & adapter.rejected_request_fields) for _, b in base.bodies)
    assert all(b["temperature"] == 0.0 for _, b in base.bodies)

    same = check_candidate(base.url, "m", ref, ["--dtype", "float32"], lossy=False, adapter=adapter)
    assert same.passed and same.checked and same.evidence == "greedy_text" and same.greedy_identical == 3

    # A candidate whose third output token differs on one prompt
    changed = engine_factory({**BASE, "gamma delta": " five six two two"}, rejects=NO_LOGPROBS_REJECTS)
    declared_lossless = check_candidate(changed.url, "m", ref, ["--dtype", "bfloat16"], lossy=False, adapter=adapter)
    assert not declared_lossless.passed and declared_lossless.greedy_identical == 2
    diverged = [s for s in declared_lossless.sequences if not s.identical]
    assert [(s.prompt_index, s.first_divergence, s.matched_prefix) for s in diverged] == [(1, 2, 2)]
    declared_lossy = check_candidate(changed.url, "m", ref, ["--dtype", "bfloat16"], lossy=True, adapter=adapter)
    assert declared_lossy.passed and declared_lossy.flag_for_review
    assert declared_lossy.mean_matched_prefix_fraction == pytest.approx((1 + 0.5 + 1) / 3)
    assert "first divergence" in declared_lossy.reason and "greedy text" in declared_lossy.summary()


def test_without_an_adapter_rejected_logprobs_fall_back_to_greedy_text(engine_factory, tokenizer_dir: Path):
    base = engine_factory(rejects=NO_LOGPROBS_REJECTS)
    ref = capture_reference(base.url, "m", [], prompts=PROMPTS, tokenizer=tokenizer_dir)
    assert ref.evidence == "greedy_text" and "422" in ref.note
    report = check_candidate(base.url, "m", ref, [], lossy=False)
    assert report.passed and report.evidence == "greedy_text"


def test_a_missing_completions_route_falls_back_to_chat_and_no_tokenizer_compares_characters(engine_factory):
    base = engine_factory(missing={"/v1/completions"})
    adapter = FakeAdapter(frozenset())
    ref = capture_reference(base.url, "m", [], prompts=PROMPTS, adapter=adapter)
    assert ref.evidence == "greedy_text" and ref.route == "chat" and ref.tokenizer is None
    assert ref.unit == "characters" and "characters" in ref.note
    report = check_candidate(base.url, "m", ref, [], lossy=False, adapter=adapter)
    assert report.passed and report.unit == "characters" and "characters" in report.summary()


def test_an_engine_that_answers_nothing_gives_a_usable_reference_that_checks_nothing(engine_factory):
    base = engine_factory(missing={"/v1/completions", "/v1/chat/completions"})
    adapter = FakeAdapter(frozenset())
    ref = capture_reference(base.url, "m", [], prompts=PROMPTS, adapter=adapter)  # never raises
    assert ref.evidence == "none" and ref.sequences == [] and "unavailable" in ref.note
    report = check_candidate(base.url, "m", ref, [], lossy=False, adapter=adapter)
    assert not report.checked and report.evidence == "none" and report.flag_for_review
    assert not report.passed  # nothing was compared, so nothing passed (the harness measures it, never adopts it)
    assert "NOT checked" in report.summary() and "NOT checked" in report.label  # nothing claims a check
    assert not report.lossless_equivalent


def test_a_logprobs_reference_is_compared_on_greedy_text_when_the_candidate_cannot_give_logprobs(
    engine_factory, tokenizer_dir: Path
):
    from research.correctness import SequenceRef

    seqs = [
        SequenceRef(prompt=p, prompt_ids=[1], output_ids=[100, 101], output_text=BASE[p], positions=[], actual_ids=[])
        for p in PROMPTS
    ]
    ref = ReferenceOutputs(engine_args=[], float32=False, top_k=5, max_tokens=4, sequences=seqs)
    assert ref.evidence == "logprobs"  # the default: references stored before evidence was recorded
    base = engine_factory(rejects=NO_LOGPROBS_REJECTS)
    report = check_candidate(
        base.url,
        "m",
        ref,
        [],
        lossy=False,
        adapter=FakeAdapter(frozenset()),
        tokenizer=tokenizer_dir,
        thresholds=CorrectnessThresholds(),
    )
    assert report.evidence == "greedy_text" and report.passed and report.unit == "tokens"


def test_greedy_text_lossless_bar_is_the_baselines_own_batch_variance():
    """Where batching alone changes the baseline's greedy outputs (near-ties in reduced precision), a
    lossless candidate may diverge as late as the baseline diverged from itself, and no earlier."""
    from research.correctness import ReferenceOutputs, compare_greedy_text, judge_greedy_text

    ref_ids = list(range(32))
    late = compare_greedy_text(0, ref_ids, "r", ref_ids[:24] + [99] * 8, "c")  # agrees on 75%
    early = compare_greedy_text(1, ref_ids, "r", ref_ids[:8] + [99] * 24, "c")  # agrees on 25%
    reference = ReferenceOutputs(
        engine_args=[], float32=False, top_k=0, max_tokens=32, sequences=[], evidence="greedy_text"
    )
    strict = judge_greedy_text(reference, [], [late], lossy=False)  # batching never changed the baseline
    assert not strict.passed and "CHANGED" in strict.reason
    noisy = judge_greedy_text(reference, [], [late], lossy=False, self_fraction=0.5)
    assert noisy.passed and noisy.flag_for_review and not noisy.lossless_equivalent
    assert "batch variance" in noisy.reason
    beyond = judge_greedy_text(reference, [], [late, early], lossy=False, self_fraction=0.5)
    assert not beyond.passed and "beyond the baseline's own batch variance" in beyond.reason
