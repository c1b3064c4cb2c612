"""The compile backend's pieces: the fused attention path against open_clip's, both compile scopes
against eager, the on-disk compile cache across processes (tiny model, CPU) and the progress display."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch
from child_process import run_python

from vlmrm_fast.encoders import make_image_encoder
from vlmrm_fast.encoders.attention import FusedSelfAttention, fuse_attention
from vlmrm_fast.encoders.build_progress import Phases
from vlmrm_fast.encoders.compile_cache import CACHE_ENV, default_compile_cache_dir, resolve_compile_cache
from vlmrm_fast.models.clip import load_clip

# torch.compile in fresh processes: left out of the quick subset (-m "not slow")
pytestmark = pytest.mark.slow

CPU = torch.device("cpu")


def tiny_clip():
    clip = load_clip("vlmrm-tiny")
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():  # non-trivial norms and biases, so that a mixed-up weight shows
        for p in clip.model.visual.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return clip


def pixels(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn((n, 3, 64, 64), generator=torch.Generator().manual_seed(seed))


@torch.inference_mode()
def test_fused_attention_matches_open_clips_multihead_attention():
    clip = tiny_clip()
    visual = clip.model.visual.eval()
    x = pixels(4)
    reference = visual(x)
    mha = visual.transformer.resblocks[0].attn
    assert fuse_attention(visual) == 2
    fused = visual.transformer.resblocks[0].attn
    assert isinstance(fused, FusedSelfAttention)
    assert fused.qkv.weight is mha.in_proj_weight and fused.out_proj is mha.out_proj  # shared, not copied
    torch.testing.assert_close(visual(x), reference, rtol=1e-4, atol=1e-5)
    assert fuse_attention(visual) == 0  # already fused


def test_fused_attention_refuses_what_it_does_not_compute():
    with pytest.raises(ValueError, match="not batch_first"):
        FusedSelfAttention(torch.nn.MultiheadAttention(64, 2, batch_first=False))
    attn = FusedSelfAttention(torch.nn.MultiheadAttention(64, 2, batch_first=True))
    x = torch.randn(2, 5, 64)
    with pytest.raises(ValueError, match="self-attention only"):
        attn(x, torch.randn(2, 5, 64), x)
    with pytest.raises(ValueError, match="no attention mask"):
        attn(x, x, x, attn_mask=torch.zeros(5, 5))


@pytest.mark.parametrize("scope", ["blocks", "tower"])
def test_compile_scopes_match_open_clip(scope, tmp_path):
    x = pixels(3, seed=1)
    with torch.inference_mode():
        reference = tiny_clip().model.encode_image(x)
    encoder = make_image_encoder(
        tiny_clip(), "compile", device=CPU, batch_size=3, compile_scope=scope, compile_cache=tmp_path, progress=False
    )
    assert encoder.compile_scope == scope and encoder.compile_mode == "default"
    torch.testing.assert_close(encoder(x), reference, rtol=1e-4, atol=1e-5)
    assert "scope" in encoder.describe()


def test_compile_option_errors(tmp_path):
    clip = tiny_clip()
    with pytest.raises(ValueError, match="compile_scope='layers' is unknown"):
        make_image_encoder(clip, "compile", device=CPU, batch_size=2, compile_scope="layers", progress=False)
    with pytest.raises(TypeError, match="compile_cache must be"):
        make_image_encoder(clip, "compile", device=CPU, batch_size=2, compile_cache=3, progress=False)
    with pytest.raises(ValueError, match="attention='flash' is unknown"):
        make_image_encoder(clip, "torch", device=CPU, attention="flash")


def test_compile_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_compile_cache_dir() == tmp_path / "xdg" / "vlmrm_fast" / "compile"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert resolve_compile_cache(True) == tmp_path / "mine"
    assert resolve_compile_cache(False) is None
    assert resolve_compile_cache(str(tmp_path / "x")) == tmp_path / "x"


def test_a_folder_the_user_chose_for_inductor_is_respected(monkeypatch, tmp_path):
    from vlmrm_fast.encoders.compile_cache import inductor_caches_in

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "users"))
    with inductor_caches_in(tmp_path / "ours") as report:
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "users")
    assert report.directory == tmp_path / "users" and not (tmp_path / "ours").exists()
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    with inductor_caches_in(tmp_path / "ours") as report:
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str((tmp_path / "ours").resolve())
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ, "restored after the compile"
    assert report.directory == tmp_path / "ours" and "not consulted" in report.describe()


_CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # a folder set by the caller would take precedence
    import torch
    from vlmrm_fast.encoders import make_image_encoder
    from vlmrm_fast.models.clip import load_clip

    start = time.perf_counter()
    encoder = make_image_encoder(load_clip("vlmrm-tiny"), "compile", device=torch.device("cpu"), batch_size=4,
                                 compile_cache=sys.argv[1], progress=True)
    out = encoder(torch.zeros(4, 3, 64, 64))
    report = encoder.cache_report
    print(json.dumps({"hits": report.hits, "misses": report.misses, "found": report.found,
                      "directory": str(report.directory), "seconds": encoder.compile_seconds,
                      "finite": bool(torch.isfinite(out).all())}))
    """
)


def test_a_second_process_finds_the_compile_cache(tmp_path):
    cache = tmp_path / "compile-cache"
    runs = []
    for _ in range(2):
        done = run_python(["-c", _CHILD, str(cache)], timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append((json.loads(done.stdout.strip().splitlines()[-1]), done.stderr))
    (first, first_log), (second, second_log) = runs
    assert first["misses"] >= 1 and not first["found"] and first["finite"]
    assert second["found"] and second["hits"] >= 1 and second["misses"] == 0 and second["finite"]
    assert first["directory"] == second["directory"] == str(cache)
    assert any(cache.rglob("*")), "the cache folder holds the compiled graph"
    # Progress: the steps and the outcome, on stderr.
    assert "compiling the vlmrm-tiny image tower for batch 4" in first_log and "compile done in" in first_log
    assert "reused from the compile cache" in second_log


def test_phases_progress(capsys):
    with Phases("compiling X", ["compile", "capture"], tty=False) as phases:
        with phases.step("compile"):
            pass
        with phases.step("capture"):
            pass
    err = capsys.readouterr().err
    assert (
        "compiling X (compile, capture) ..." in err
        and "compiling X: capture done in" in err
        and "compiling X: done in" in err
    )
    with Phases("compiling Y", ["compile"], tty=True) as phases:  # the terminal form: one ticking bar
        with phases.step("compile"):
            pass
    err = capsys.readouterr().err
    assert "compiling Y" in err and "1/1 steps" in err
    with Phases("silent", ["a"], enabled=False) as phases:
        with phases.step("a"):
            pass
    assert capsys.readouterr().err == ""
