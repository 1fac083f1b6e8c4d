"""Tests bench/plot.py: the PNGs it draws from `troupe bench engine --json` documents, the series
it reads from them, and its errors on documents it cannot draw.

fixtures/engine_short.json is the document of a real short run on a loaded 2-vCPU AMD EPYC, with
llama.cpp (whose figures there are tiny: it suffered the load most):
  troupe bench engine --json engine_short.json --matmul fast --kv both --batches 1,4,16
    --repeats 1 --batch-repeats 1 --prefill-tokens 64 --decode-tokens 16 --long-tokens 256
    --batch-prompt 16 --batch-gen 8
With TROUPE_BIN and TROUPE_MODEL set (ctest sets them), the last test makes
a fresh document with the troupe binary of this build and draws it too, so the writer and the
reader cannot drift apart unnoticed.
"""
import copy
import json
import math
import os
import subprocess
import sys

import pytest
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import plot  # noqa: E402  (bench/plot.py)

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "engine_short.json")
PNGS = ("engine_batch_scaling.png", "engine_step_phases.png")


def fixture():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def check_pngs(folder):
    for name in PNGS:
        path = os.path.join(folder, name)
        assert os.path.isfile(path), f"{name} was not written"
        size = os.path.getsize(path)
        assert 5_000 < size < 200_000, f"{name} is {size} bytes"
        with Image.open(path) as im:
            im.verify()  # a whole, uncorrupted PNG
        with Image.open(path) as im:
            assert im.format == "PNG"
            w, h = im.size
            assert 400 <= w <= 3000 and 300 <= h <= 3000, f"{name} is {w}x{h}"
            # Something is drawn: lines and bars in several colours, not a blank canvas.
            colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
            assert colours is not None and len(colours) > 20, f"{name} has {len(colours or [])} colours"


def test_draws_both_pngs_from_a_real_run(tmp_path):
    assert plot.main([FIXTURE, "--out", str(tmp_path)]) == 0
    check_pngs(tmp_path)


def test_writes_next_to_the_json_without_out(tmp_path):
    doc = tmp_path / "run.json"
    doc.write_text(json.dumps(fixture()))
    assert plot.main([str(doc)]) == 0
    check_pngs(tmp_path)


def test_scaling_series_are_the_documents_medians_and_llama_cpp():
    doc = fixture()
    series = plot.scaling_series(doc)
    assert set(series) == {c["name"] for c in doc["configurations"]} | {"llama.cpp"}
    for c in doc["configurations"]:
        assert series[c["name"]] == sorted((b["batch"], b["median"]) for b in c["batched"])
    assert series["llama.cpp"] == sorted((b["batch"], b["tokens_per_s"]) for b in doc["llama_cpp"]["batched"])


def test_no_llama_cpp_line_when_the_run_skipped_it():
    doc = fixture()
    doc["llama_cpp"].update(available=False, note="llama.cpp skipped (--skip-llama)", batched=[])
    assert "llama.cpp" not in plot.scaling_series(doc)


def test_llama_cpp_line_is_its_batched_figures(tmp_path):
    # As the bench writes them when llama-batched-bench ran (in its order, not sorted).
    doc = fixture()
    doc["llama_cpp"].update(available=True, note=None,
                            batched=[{"batch": 16, "tokens_per_s": 230.0}, {"batch": 1, "tokens_per_s": 137.4},
                                     {"batch": 4, "tokens_per_s": 177.5}])
    assert plot.scaling_series(doc)["llama.cpp"] == [(1, 137.4), (4, 177.5), (16, 230.0)]
    path = tmp_path / "with_llama.json"
    path.write_text(json.dumps(doc))
    assert plot.main([str(path), "--out", str(tmp_path)]) == 0
    check_pngs(tmp_path)


def test_phase_parts_add_up_to_the_step():
    # The bench writes each phase's mean and the rest of the step's wall time: together they are
    # the step. Every configuration of the fixture profiles every batch size.
    doc = fixture()
    table = plot.phase_table(doc)
    assert set(table) == {c["name"] for c in doc["configurations"]}
    for c in doc["configurations"]:
        steps = {b["batch"]: b["step"] for b in c["batched"]}
        assert [b for b, _ in table[c["name"]]] == sorted(steps)
        for batch, parts in table[c["name"]]:
            assert len(parts) == 8  # 7 phases + outside the forward pass
            assert math.isclose(sum(ms for _, ms in parts), steps[batch]["step_ms"], rel_tol=1e-4)
            assert all(ms >= 0 for label, ms in parts if "outside" not in label)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.update(schema="something.else"), "'schema'"),
        (lambda d: d.update(schema_version=99), "'schema_version' is 99"),
        (lambda d: d.update(configurations=[]), "'configurations' is missing or empty"),
        (lambda d: d["configurations"][0].pop("batched"), "configurations[0].batched is missing"),
        (lambda d: d["configurations"][0]["batched"][0].update(median="fast"), "configurations[0].batched[0]"),
    ],
)
def test_rejects_a_document_it_cannot_draw(tmp_path, capsys, change, message):
    doc = copy.deepcopy(fixture())
    change(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert plot.main([str(path), "--out", str(tmp_path / "out")]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / PNGS[0]).exists()


def test_rejects_a_file_that_is_not_json_or_missing(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert plot.main([str(bad)]) == 1
    assert "is not JSON" in capsys.readouterr().err
    assert plot.main([str(tmp_path / "missing.json")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_a_fresh_run_of_this_build_draws(tmp_path):
    troupe, model = os.environ.get("TROUPE_BIN"), os.environ.get("TROUPE_MODEL")
    if not troupe or not model or not os.path.isfile(model):
        pytest.skip("TROUPE_BIN / TROUPE_MODEL not set or the model file is missing")
    out = tmp_path / "run.json"
    # The fast order where this CPU has its kernels (AVX2 or AVX-512 VNNI), else llama.cpp's: the bench
    # refuses to measure an order that cannot run.
    info = subprocess.run([troupe, "info"], capture_output=True, text=True, timeout=60).stdout
    order = "fast" if "fast order: available" in info else "llama.cpp"
    # The smallest run that still has every part: two batch sizes, a long-context test, no llama.cpp.
    r = subprocess.run(
        [troupe, "bench", "engine", "--model", model, "--json", str(out), "--skip-llama", "--matmul", order,
         "--kv", "f16", "--batches", "1,2", "--repeats", "1", "--batch-repeats", "1", "--prefill-tokens", "16",
         "--decode-tokens", "4", "--long-tokens", "64", "--batch-prompt", "8", "--batch-gen", "4",
         "--eval-windows", "1", "--eval-ctx", "64"],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == plot.SCHEMA and doc["schema_version"] == plot.SCHEMA_VERSION
    (conf,) = doc["configurations"]
    assert conf["long_prefill"]["tokens"] == 64 and conf["long_decode"]["depth"] == 64
    assert [b["batch"] for b in conf["batched"]] == [1, 2]
    assert doc["llama_cpp"]["available"] is False and "skipped" in doc["llama_cpp"]["note"]
    # The quality table of the same run: each fast path against the bit-exact order with f32 K/V.
    q = doc["quality"]
    assert q["windows"] == 1 and q["n_ctx"] == 64 and q["tokens_scored"] == 31
    assert 1 < q["ppl_reference"] < 1000
    # A row for each path this CPU runs (q8 K/V needs AVX2 or AVX-512; SmolLM2's heads are 64 wide),
    # and for each other one a note naming it, never a row that would be another path's.
    q8_runs = order == "fast" and "q8 K/V: available" in info
    fast_rows = ["fast order, fp16 K/V", "fast order, q8 K/V"]
    runs = [name for name in fast_rows if order == "fast" and (q8_runs or "q8" not in name)]
    assert [p["name"] for p in q["paths"]] == ["llama.cpp order, fp16 K/V", *runs]
    missing = [name for name in fast_rows if name not in runs]
    assert all(any(f"no row for {name}" in n for n in q["notes"]) for name in missing), q["notes"]
    for p in q["paths"]:
        assert 0 <= p["mean_kl"] <= p["max_kl"] < 1 and 0.5 < p["top1_agreement"] <= 1
    assert any("AMX" in n for n in q["notes"])
    assert plot.main([str(out), "--out", str(tmp_path)]) == 0
    check_pngs(tmp_path)
    # --help says what the document holds.
    h = subprocess.run([troupe, "bench", "engine", "--help"], capture_output=True, text=True, timeout=60)
    assert "schema_version" in h.stdout and "--json" in h.stdout
