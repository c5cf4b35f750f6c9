"""Hostile models (issue 21 part 1): a fault inside the user's model is the user's, not robfair's.

A forward that raises (any exception, ``sys.exit`` included), returns a tuple, a list, a dict,
``None``, integers or the wrong shape, NaN or Inf logits, a forward without input gradients, an
``--arch`` file that exits or raises on import, a constructor that raises, a ``.pt2`` whose guards
fix another image shape, ``--mean/--std`` of the wrong length: each is one line on stderr naming
the model and the fix, exit code 2, no traceback, no crash log and nothing written, through
``robfair audit``, ``certify``, ``leaderboard`` and ``train``; and the same as a ``ModelError`` from
``robfair.audit`` / ``robfair.certify``. Float64 and float16 weights and a ``.pt2`` exported for a
range of batch sizes just work, with the predictions of the model run directly.
"""

from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import robfair
from _shared import run_cli
from test_hostile import snapshot  # every path below a folder, with its size and time
from robfair.errors import ModelError, RobfairError
from robfair.models.validate import NonFiniteLogits

TINY_MODEL = ["--model", "mlp", "--set", "model_kwargs={hidden: [8]}"]
AUDIT = ["audit", "--bootstrap", "0", "--attack", "fgsm", "--eps", "0.1", "--device", "cpu", "--probe", "0"]
CERTIFY = ["certify", "--n", "100", "--n0", "10", "--per-class", "2", "--device", "cpu", "--bootstrap", "0"]

#: the user's architecture file: a linear model on digits (1x8x8, 10 classes) whose forward misbehaves as asked
ARCH = '''
import sys
import torch
from torch import nn


class MyError(Exception):
    pass


class Net(nn.Module):
    def __init__(self, mode="ok", k=10):
        super().__init__()
        self.mode = mode
        self.lin = nn.Linear(64, k)

    def forward(self, x):
        z = self.lin(x.flatten(1))
        m = self.mode
        if m == "raise":
            raise RuntimeError("my layer exploded\\nsecond line of the message")
        if m == "valueerror":
            raise ValueError("bad value in forward")
        if m == "assert":
            assert False, "shapes disagree"
        if m == "custom":
            raise MyError("the custom block refuses")
        if m == "index":
            return z[:, 99]
        if m == "exit":
            sys.exit(3)
        if m == "tuple":
            return z, z.detach()
        if m == "list":
            return [z]
        if m == "dict":
            return {"logits": z, "hidden": x}
        if m == "none":
            return None
        if m == "nan":
            return z * float("nan")
        if m == "inf":
            odd = (torch.arange(x.shape[0]) % 2 == 1)[:, None]
            return torch.where(odd, torch.full_like(z, float("inf")), z)
        if m == "int":
            return z.argmax(1, keepdim=True).expand(-1, z.shape[1])
        if m == "rank3":
            return z[:, None, :]
        if m == "rows":
            return z[:1]
        if m == "nograd":
            return z.detach()
        if m == "sqrt":  # NaN outside [0, 1]: certify's Gaussian noise
            return self.lin(torch.sqrt(x).flatten(1))
        if m == "inplace":  # the forward runs, its backward cannot
            p = torch.sigmoid(z)
            p.mul_(2)
            return p
        return z


class Later(Net):
    """Finite on its first two forwards (the first batch's check and its gradient check), NaN after."""

    calls = 0

    def forward(self, x):
        Later.calls += 1
        z = self.lin(x.flatten(1))
        return z if Later.calls <= 2 else z * float("nan")


class RaiseLater(Net):
    """Fine on its first two forwards (the first batch's check and gradient check), then its own
    error: inside the attack, past the check."""

    calls = 0

    def forward(self, x):
        RaiseLater.calls += 1
        if RaiseLater.calls > 2:
            raise RuntimeError("CUDA kernel for my custom op is missing")
        return self.lin(x.flatten(1))


class Boom(Net):
    def __init__(self):
        raise ValueError("cannot build without a GPU")
'''


class Lin(nn.Module):
    def __init__(self, c: int = 1, k: int = 10) -> None:
        super().__init__()
        self.lin = nn.Linear(64 * c, k)

    def forward(self, x):
        return self.lin(x.flatten(1))


class Pair(Lin):
    def forward(self, x):
        z = self.lin(x.flatten(1))
        return z, z


class Nan(Lin):
    def forward(self, x):
        return self.lin(x.flatten(1)) * float("nan")


class Raise(Lin):
    def forward(self, x):
        if x.shape[0] > 0:
            raise RuntimeError("my scripted layer exploded")
        return self.lin(x.flatten(1))


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.code = root / "code"


def _script(module: nn.Module, path: Path) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(module.eval()), str(path))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Model files: the architecture file and its weights, TorchScript and torch.export programs,
    a finished tiny run and a copy of its checkpoint with NaN weights."""
    from torch.export import Dim

    from robfair.cli import main
    from robfair.models import load_checkpoint, save_checkpoint

    root = tmp_path_factory.mktemp("hostile_models")
    w = World(root)
    w.code.mkdir()
    (w.code / "arch.py").write_text(ARCH)
    (w.code / "exits.py").write_text("import sys\nsys.exit(0)\n")
    (w.code / "raises.py").write_text("raise ImportError(\"No module named 'timm'\")\n")
    torch.manual_seed(0)
    torch.save({"lin.weight": torch.randn(10, 64) / 8, "lin.bias": torch.zeros(10)}, root / "w.pt")
    torch.save({"lin.weight": torch.randn(5, 64) / 8, "lin.bias": torch.zeros(5)}, root / "w5.pt")
    lin = Lin()
    _script(lin, root / "good.ts")
    _script(Lin().double(), root / "f64.ts")
    _script(Pair(), root / "pair.ts")
    _script(Nan(), root / "nan.ts")
    _script(Raise(), root / "raise.ts")
    torch.export.save(torch.export.export(Lin(c=3).eval(), (torch.rand(4, 3, 8, 8),),
                                          dynamic_shapes={"x": {0: Dim("b", min=2, max=1024)}}), root / "rgb.pt2")
    torch.export.save(torch.export.export(lin.eval(), (torch.rand(4, 1, 8, 8),),
                                          dynamic_shapes={"x": {0: Dim("b", min=2, max=100)}}), root / "upto100.pt2")
    torch.save(lin.state_dict(), root / "lin.pt")
    with pytest.raises(SystemExit) as exc:  # one tiny finished run (1 epoch of an 8-unit MLP on digits)
        main(["train", *TINY_MODEL, "--epochs", "1", "--device", "cpu", "--method", "standard",
              "--set", "val_per_class=10", "--set", "val_attack=fgsm", "--eps", "0.1", "--audit-attack", "none",
              "--out", str(root / "run")])
    assert exc.value.code == 0
    model, meta = load_checkpoint(root / "run" / "checkpoints" / "best.pt")
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    save_checkpoint(root / "nan_ckpt.pt", model, classes=meta["classes"], extra=meta["extra"])
    return w


def one_line(code, out, err, needles, expected_code=2):
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == expected_code, f"exit {code} (wanted {expected_code})\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {lines[:5]}"
    assert "Traceback" not in out + err and "internal error" not in err and "bug in robfair" not in err
    for needle in needles:
        assert needle.lower() in lines[0].lower(), f"{lines[0]!r} does not mention {needle!r}"
    return lines[0]


def arch(mode: str = "ok", cls: str = "Net", weights: str = "w.pt", **kw) -> list[str]:
    kwargs = ", ".join([f"mode: {mode}"] + [f"{k}: {v}" for k, v in kw.items()]) if cls == "Net" else None
    return ["-m", "{root}/" + weights, "--arch", "{code}/arch.py:" + cls] + (["--arch-kwargs", "{" + kwargs + "}"]
                                                                         if kwargs else [])


EXPECTS = "expects (N, K) logits"

# (id, argv with {root}/{code} placeholders, needles of the one line)
CASES = [
    # ---- audit: the forward raises (the model's own message, first line only)
    ("audit-forward-runtimeerror", AUDIT + arch("raise") + ["--out", "{root}/new.json"],
     ["w.pt", "arch.py:Net", "raised RuntimeError: my layer exploded on a batch of shape (256, 1, 8, 8)", EXPECTS]),
    ("audit-forward-valueerror", AUDIT + arch("valueerror"), ["raised ValueError: bad value in forward", EXPECTS]),
    ("audit-forward-assertionerror", AUDIT + arch("assert"), ["raised AssertionError: shapes disagree"]),
    ("audit-forward-custom-exception", AUDIT + arch("custom"), ["raised MyError: the custom block refuses"]),
    ("audit-forward-indexerror", AUDIT + arch("index"), ["raised IndexError", "out of bounds"]),
    ("audit-forward-sys-exit", AUDIT + arch("exit"), ["raised SystemExit: sys.exit(3)"]),
    ("audit-forward-raises-in-the-attack", AUDIT + arch(cls="RaiseLater"),
     ["RaiseLater", "raised RuntimeError: CUDA kernel for my custom op is missing on a batch of shape (256, 1, 8, 8)"]),
    ("audit-backward-fails", AUDIT + arch("inplace"), ["backward pass", "inplace operation"]),
    ("audit-torchscript-raises", AUDIT + ["-m", "{root}/raise.ts"],
     ["raise.ts", "raised RuntimeError (in TorchScript): my scripted layer exploded"]),
    # ---- audit: it returns something that is not (N, K) float logits
    ("audit-returns-tuple", AUDIT + arch("tuple"), ["returned a tuple of 2 (Tensor (256, 10), Tensor (256, 10))",
                                                    "out[0]", EXPECTS]),
    ("audit-returns-list", AUDIT + arch("list"), ["returned a list of 1", "out[0]"]),
    ("audit-returns-dict", AUDIT + arch("dict"), ["returned a dict with keys ['logits', 'hidden']", "out['logits']"]),
    ("audit-returns-none", AUDIT + arch("none"), ["returned None", EXPECTS]),
    ("audit-returns-integers", AUDIT + arch("int"), ["returned int64 values", "not class ids"]),
    ("audit-returns-rank3", AUDIT + arch("rank3"), ["shape (256, 1, 10)", "(here (256, 10))"]),
    ("audit-returns-one-row", AUDIT + arch("rows"), ["shape (1, 10)", "one row of logits per image"]),
    ("audit-returns-5-of-10-classes", AUDIT + arch(weights="w5.pt", k=5), ["5 logits", "10 classes"]),
    ("audit-torchscript-tuple", AUDIT + ["-m", "{root}/pair.ts"], ["pair.ts", "returned a tuple of 2"]),
    # ---- audit: NaN / Inf, refused with the count
    ("audit-nan-logits", AUDIT + arch("nan") + ["--out", "{root}/new.json"],
     ["NaN/Inf logits for 256 of 256 samples of the first batch"]),
    ("audit-inf-logits-half", AUDIT + arch("inf"), ["NaN/Inf logits for 128 of 256 samples of the first batch"]),
    ("audit-nan-after-first-batch", ["audit", "--bootstrap", "0", "--attack", "pgd5", "--eps", "0.1", "--device", "cpu",
                                     "--probe", "0"] + arch(cls="Later"),
     ["Later", "NaN/Inf logits for 195 of 195 samples of batch 2 (dataset items 256..450"]),
    ("audit-nan-torchscript", AUDIT + ["-m", "{root}/nan.ts"], ["nan.ts", "for 256 of 256 samples"]),
    ("audit-nan-weights-checkpoint", AUDIT + ["-m", "{root}/nan_ckpt.pt"], ["nan_ckpt.pt", "weights hold NaN/Inf"]),
    # ---- audit: gradients, files, shapes, normalization
    ("audit-forward-without-gradient", AUDIT + arch("nograd"), ["without a gradient", "torch.no_grad()"]),
    ("audit-arch-sys-exit-on-import", AUDIT + ["-m", "{root}/w.pt", "--arch", "{code}/exits.py:Net"],
     ["exits.py", "sys.exit(0)", "__main__"]),
    ("audit-arch-raises-on-import", AUDIT + ["-m", "{root}/w.pt", "--arch", "{code}/raises.py:Net"],
     ["raises.py", "ImportError", "timm"]),
    ("audit-arch-constructor-raises", AUDIT + arch(cls="Boom"), ["Boom", "raised ValueError: cannot build without a GPU"]),
    ("audit-pt2-image-shape-guard", AUDIT + ["-m", "{root}/rgb.pt2"], ["rgb.pt2", "3x8x8", "1x8x8"]),
    ("audit-mean-std-wrong-length", AUDIT + arch() + ["--mean", "0.5,0.5", "--std", "0.2,0.2"],
     ["--mean/--std", "2 values", "1 channel", "pass 1 value"]),
    # ---- certify
    ("certify-forward-raises", CERTIFY + arch("raise") + ["--out", "{root}/cert.json"], ["raised RuntimeError"]),
    ("certify-returns-tuple", CERTIFY + arch("tuple") + ["--out", "{root}/cert.json"], ["returned a tuple of 2"]),
    ("certify-returns-dict", CERTIFY + arch("dict"), ["out['logits']"]),
    ("certify-nan-logits", CERTIFY + arch("nan") + ["--out", "{root}/cert.json"],
     ["NaN/Inf logits for 20 of 20 clean images"]),
    ("certify-nan-under-noise", CERTIFY + arch("sqrt") + ["--out", "{root}/cert.json"],
     ["NaN/Inf logits", "noise", "outside the box"]),
    ("certify-pt2-image-shape-guard", CERTIFY + ["-m", "{root}/rgb.pt2"], ["rgb.pt2", "3x8x8"]),
    ("certify-arch-sys-exit-on-import", CERTIFY + ["-m", "{root}/w.pt", "--arch", "{code}/exits.py:Net"], ["sys.exit(0)"]),
    # ---- leaderboard: every model is checked before the first audit (test_leaderboard_refuses_before_any_audit)
    ("leaderboard-second-returns-tuple", ["leaderboard", "{root}/good.ts", "{root}/pair.ts", "--data", "digits",
                                          "--eps", "0.1", "--out", "{root}/lb.html"], ["pair.ts", "tuple"]),
    ("leaderboard-second-nan", ["leaderboard", "{root}/good.ts", "{root}/nan.ts", "--data", "digits", "--eps", "0.1",
                                "--out", "{root}/lb.html"], ["nan.ts", "NaN/Inf logits for 256 of 256"]),
    ("leaderboard-second-raises", ["leaderboard", "{root}/good.ts", "{root}/raise.ts", "--data", "digits", "--eps",
                                   "0.1", "--out", "{root}/lb.html"], ["raise.ts", "my scripted layer exploded"]),
    ("leaderboard-second-shape-guard", ["leaderboard", "{root}/good.ts", "{root}/rgb.pt2", "--data", "digits", "--eps",
                                        "0.1", "--out", "{root}/lb.html"], ["rgb.pt2", "3x8x8"]),
    # ---- train
    ("train-init-nan-weights", ["train", *TINY_MODEL, "--epochs", "1", "--device", "cpu", "--audit-attack", "none",
                                "--set", "val_per_class=10", "--init", "{root}/nan_ckpt.pt", "--out",
                                "{root}/new_run"],
     ["--init", "nan_ckpt.pt", "NaN/Inf", "before that run diverged"]),
]


def _argv(template: list[str], w: World) -> list[str]:
    fill = {"root": str(w.root), "code": str(w.code)}
    return [a.replace("{root}", fill["root"]).replace("{code}", fill["code"]) for a in template]


def test_corpus_size():
    assert len(CASES) >= 20 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name,template,needles", CASES, ids=[c[0] for c in CASES])
def test_hostile_model(name, template, needles, world, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBFAIR_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # importing the --arch file writes no __pycache__
    before = snapshot(world.root)
    code, out, err = run_cli(_argv(template, world), capsys)
    one_line(code, out, err, needles)
    after = snapshot(world.root)
    assert after == before, f"files changed: {set(after.items()) ^ set(before.items())}"
    assert not (tmp_path / "logs").exists(), "a fault of the user's model must not be logged as a crash of robfair"


def test_leaderboard_refuses_before_any_audit(world, capsys, monkeypatch):
    """The second model's fault is found before the first model's audit: no audit ever starts."""
    report = importlib.import_module("robfair.auditing.audit_report")
    engine = importlib.import_module("robfair.auditing.distributed")  # what audit() evaluates through
    calls = {"audit": 0, "evaluate": 0}
    real_audit, real_evaluate = report.audit, engine.evaluate

    def counted(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(report, "audit", counted("audit", real_audit))
    monkeypatch.setattr(engine, "evaluate", counted("evaluate", real_evaluate))
    code, out, err = run_cli(_argv(["leaderboard", "{root}/good.ts", "{root}/pair.ts", "--data", "digits", "--eps",
                                    "0.1", "--out", "{root}/lb2.html"], world), capsys)
    one_line(code, out, err, ["pair.ts"])
    assert calls == {"audit": 0, "evaluate": 0}
    assert not (world.root / "lb2.html").exists()
    # the check is not vacuous: with two good models both audits run
    code, out, err = run_cli(_argv(["leaderboard", "{root}/good.ts", "{root}/upto100.pt2", "--data", "digits,limit=60",
                                    "--eps", "0.1", "--attack", "fgsm", "--probe", "0", "--bootstrap", "0",
                                    "--no-figures", "--out", "{root}/lb3.html"], world), capsys)
    assert code == 0, err
    assert calls["audit"] == 2
    shutil.rmtree(world.root / "lb3_tables", ignore_errors=True)
    for p in world.root.glob("lb3*"):
        p.unlink() if p.is_file() else shutil.rmtree(p)


# ---------------------------------------------------------------------------------------------- what just works
def _digits():
    from robfair.data import load_dataset

    return load_dataset("digits", split="test")


def _eager_pred(model: nn.Module, ds, dtype=torch.float32) -> np.ndarray:
    with torch.no_grad():
        return model.eval()(ds.images().to(dtype)).argmax(1).numpy()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_float64_and_half_weights_just_work(dtype):
    """Weights in float64 / float16: the batches reach the model in its dtype, and the audit's clean
    predictions are the model's own, run directly in that dtype."""
    ds = _digits().subset(torch.arange(120))
    torch.manual_seed(1)
    net = Lin().to(dtype)
    rep = robfair.audit(net, ds, attacks=["fgsm"], eps=0.05, device="cpu", probe=0, examples=0)
    np.testing.assert_array_equal(rep.outcomes.clean_pred, _eager_pred(net, ds, dtype))
    assert next(net.parameters()).dtype == dtype  # the user's model is not converted
    cert = robfair.certify(net, ds, 0.25, n0=10, n=50, per_class=1, device="cpu")
    assert len(cert) == len(set(ds.y.tolist()))
    np.testing.assert_array_equal(cert.base_pred, _eager_pred(net, ds, dtype)[cert.index])


def test_float64_torchscript_through_the_cli(world, capsys, tmp_path):
    code, out, err = run_cli(_argv(AUDIT + ["-m", "{root}/f64.ts"], world) + ["--out", str(tmp_path / "a.json")], capsys)
    assert code == 0, err
    from robfair.auditing import AuditReport

    from robfair.models import load_any

    rep = AuditReport.load(tmp_path / "a.json")
    net, _ = load_any(world.root / "f64.ts")
    np.testing.assert_array_equal(rep.outcomes.clean_pred, _eager_pred(net, _digits(), torch.float64))


def test_pt2_exported_for_a_batch_range_runs_in_chunks(world):
    """A .pt2 whose guard allows batches of 2..100 audits batches of 256 (chunked within its range)
    with exactly the predictions of the same weights run directly."""
    from robfair.models import load_any

    ds = _digits()
    prog, _ = load_any(world.root / "upto100.pt2")
    eager = Lin()
    eager.load_state_dict(torch.load(world.root / "lin.pt", weights_only=True))
    a = robfair.audit(prog, ds, attacks=["fgsm"], eps=0.1, device="cpu", probe=0, examples=0, batch_size=256)
    b = robfair.audit(eager, ds, attacks=["fgsm"], eps=0.1, device="cpu", probe=0, examples=0, batch_size=256)
    np.testing.assert_array_equal(a.outcomes.clean_pred, b.outcomes.clean_pred)
    np.testing.assert_array_equal(a.outcomes.adv_pred["fgsm"], b.outcomes.adv_pred["fgsm"])


# ---------------------------------------------------------------------------------------------- the Python API
def _data(n=40, k=4):
    g = torch.Generator().manual_seed(0)
    return torch.rand(n, 1, 8, 8, generator=g), torch.arange(n) % k


class Returns(nn.Module):
    def __init__(self, what: str, k: int = 4) -> None:
        super().__init__()
        self.what = what
        self.lin = nn.Linear(64, k)

    def forward(self, x):
        z = self.lin(x.flatten(1))
        if self.what == "tuple":
            return z, z
        if self.what == "dict":
            return {"logits": z}
        if self.what == "nan":
            return z.masked_fill(torch.arange(x.shape[0])[:, None] < 3, float("nan"))
        if self.what == "raise":
            raise TypeError("forward() got an unexpected tensor layout")
        if self.what == "exit":
            raise SystemExit(0)
        if self.what == "ctrl-c":
            raise KeyboardInterrupt
        return z


API_CASES = [
    ("tuple", "returned a tuple of 2"),
    ("dict", "out['logits']"),
    ("nan", "NaN/Inf logits for 3 of 40 samples of the first batch"),
    ("raise", "raised TypeError: forward() got an unexpected tensor layout on a batch of shape (40, 1, 8, 8)"),
    ("exit", "raised SystemExit: sys.exit(0)"),
]


@pytest.mark.parametrize("what,needle", API_CASES, ids=[c[0] for c in API_CASES])
def test_api_audit_raises_a_model_error(what, needle):
    with pytest.raises(ModelError) as e:
        robfair.audit(Returns(what), _data(), attacks=["fgsm"], eps=0.1, device="cpu", probe=0)
    assert isinstance(e.value, RobfairError) and "\n" not in str(e.value)
    assert needle in str(e.value) and "the model (Returns)" in str(e.value), str(e.value)


@pytest.mark.parametrize("what,needle", API_CASES, ids=[c[0] for c in API_CASES])
def test_api_certify_raises_a_model_error(what, needle):
    from robfair.data import as_dataset

    ds = as_dataset(_data())
    needle = needle.replace("samples of the first batch", "clean images, the first to certify")
    with pytest.raises(ModelError) as e:
        robfair.certify(Returns(what), ds, 0.25, n0=10, n=20, device="cpu")
    assert needle in str(e.value), str(e.value)


def test_api_ctrl_c_inside_forward_stays_an_interrupt():
    with pytest.raises(KeyboardInterrupt):
        robfair.audit(Returns("ctrl-c"), _data(), attacks=["fgsm"], eps=0.1, device="cpu", probe=0)


def test_api_nan_logits_are_a_nonfinite_error_with_the_count():
    with pytest.raises(NonFiniteLogits) as e:
        robfair.audit(Returns("nan"), _data(), attacks=["fgsm"], eps=0.1, device="cpu", probe=0)
    assert (e.value.bad, e.value.n) == (3, 40)


def test_certify_refuses_the_all_nan_model_that_used_to_get_certificates():
    """The issue's finding: all-NaN logits got certificates up to radius 0.456; now no certificate."""
    from robfair.data import as_dataset

    with pytest.raises(NonFiniteLogits):
        robfair.certify(Returns("nan"), as_dataset(_data()), 0.25, n0=10, n=100, device="cpu")


def test_the_first_batch_check_costs_no_extra_forward():
    """The check runs on the whole first batch and its logits are that batch's clean predictions:
    without attacks, one forward per batch, as before the check existed."""
    from robfair.auditing import evaluate
    from robfair.data import as_dataset

    calls = []
    net = Returns("ok")
    net.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    out = evaluate(net, as_dataset(_data(n=50)), [], 0.1, batch_size=16, device="cpu")
    assert calls == [16, 16, 16, 2]
    with torch.no_grad():
        np.testing.assert_array_equal(out.clean_pred, net(_data(n=50)[0]).argmax(1).numpy())


def test_a_callable_attack_needs_no_input_gradient():
    """The gradient check applies to robfair's attacks only: a gradient-free attack of the user's
    own runs on a model without input gradients."""
    from robfair.auditing import evaluate
    from robfair.data import as_dataset

    class Frozen(Returns):
        def forward(self, x):
            return super().forward(x).detach()

    def noise(model, x, y, eps, generator=None, early_exit=True):
        return (x + eps * torch.sign(torch.randn(x.shape, generator=generator))).clamp(0, 1)

    out = evaluate(Frozen("ok"), as_dataset(_data()), [noise], 0.1, device="cpu")
    assert out.n == 40
    with pytest.raises(ModelError, match="without a gradient"):
        evaluate(Frozen("ok"), as_dataset(_data()), ["fgsm"], 0.1, device="cpu")


def test_train_final_audit_refuses_nan_logits():
    """The trainer's final audit (runner.audit_hook) refuses a model with NaN logits, with the count."""
    from robfair.data import as_dataset
    from robfair.training.config import TrainConfig
    from robfair.training.runner import audit_hook

    hook = audit_hook(TrainConfig(data="digits", model="mlp", eps=0.1, device="cpu", probe=0), ["fgsm"])
    with pytest.raises(NonFiniteLogits, match="3 of 40"):
        hook(Returns("nan"), as_dataset(_data()))


def test_arch_file_exiting_on_import_is_a_model_error(tmp_path, monkeypatch):
    from robfair.models import load_any

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(0)\n")
    torch.save(Lin().state_dict(), tmp_path / "w.pt")
    with pytest.raises(ModelError, match=r"exits.py called sys.exit\(0\)"):
        load_any(tmp_path / "w.pt", arch=f"{tmp_path / 'exits.py'}:Lin")


def test_validate_model_passes_a_good_model_and_names_a_bad_one():
    from robfair.auditing import validate_model
    from robfair.data import as_dataset

    ds = as_dataset(_data())
    validate_model(Returns("ok"), ds, device="cpu")
    with pytest.raises(ModelError, match=re.escape("the model (Returns) returned a dict")):
        validate_model(Returns("dict"), ds, device="cpu")
