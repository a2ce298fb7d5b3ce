"""Export torchvision models to ONNX, as a held-out set for ``bench_heldout.py``.

torch is not a dependency of autotune: run this with an interpreter that has torch and
torchvision (a separate virtual environment), e.g.

    python -m venv /tmp/tv && /tmp/tv/bin/pip install torch torchvision onnx
    /tmp/tv/bin/python benchmarks/export_torchvision.py OUTDIR [--models resnet18,...]
        [--calibrate]

Each model is exported with default-initialised (random) weights, in eval mode, batch 1,
static shapes, opset 17, by the TorchScript exporter (``dynamo=False``), as OUTDIR/NAME.onnx;
a small UNet (nearest upsampling, concatenated skips) is built here. Random initialisation
can leave a network's output independent of its input (a batch norm's running statistics
are 0/1 while the activations shrink or grow layer after layer): ``--calibrate`` also writes
NAME_cal.onnx with every batch norm's statistics measured on random data (three batches in
training mode), whose outputs are O(1) and depend on the input, the meaningful numeric check.
A model that fails to export is reported and skipped.

``timm:NAME`` exports a model of timm (``pip install timm`` beside torch), e.g. its
TensorFlow ports ``timm:tf_efficientnet_b0``, ``timm:tf_mobilenetv3_small_100``: their
"same" padding is a ``Pad`` whose pads are computed from the input's shape, before a conv of
no padding, unequal on both sides at stride 2. The file is OUTDIR/NAME.onnx.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torchvision import models
from torchvision.models import segmentation

#: The default set: image classifiers and two segmentation networks covering grouped and
#: depthwise convs, squeeze-excitation, SiLU/HardSwish, ceil-mode pools, concats, standalone
#: batch norms (DenseNet), dilated convs and bilinear upsampling (the segmentation ones),
#: channel shuffles, LayerNorm and attention (refused: not CNN operators autotune maps).
MODELS = (
    "unet",
    "squeezenet1_1",
    "shufflenet_v2_x0_5",
    "mnasnet0_5",
    "mobilenet_v3_small",
    "regnet_x_400mf",
    "regnet_y_400mf",
    "efficientnet_b0",
    "resnet18",
    "densenet121",
    "googlenet",
    "inception_v3",
    "resnext50_32x4d",
    "alexnet",
    "vgg11_bn",
    "convnext_tiny",
    "lraspp_mobilenet_v3_large",
    "fcn_resnet50",
)


class UNet(nn.Module):
    """Two levels down (max pool) and up (nearest upsampling, concatenated skips)."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()

        def block(i: int, o: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(i, o, 3, padding=1), nn.ReLU(), nn.Conv2d(o, o, 3, padding=1), nn.ReLU()
            )

        self.d1, self.d2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.pool, self.up = nn.MaxPool2d(2), nn.Upsample(scale_factor=2, mode="nearest")
        self.u2, self.u1 = block(6 * c, 2 * c), block(3 * c, c)
        self.head = nn.Conv2d(c, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.d1(x)
        b = self.d2(self.pool(a))
        m = self.mid(self.pool(b))
        y = self.u2(torch.cat([self.up(m), b], 1))
        return self.head(self.u1(torch.cat([self.up(y), a], 1)))


class Segmentation(nn.Module):
    """torchvision's segmentation models return a dict: its ``out``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def build(name: str) -> tuple[nn.Module, int]:
    """The model and its input's height and width."""
    if name.startswith("timm:"):
        import timm  # only for these: not needed for the torchvision set

        return timm.create_model(name.removeprefix("timm:"), pretrained=False), 224
    if name == "unet":
        return UNet(), 64
    if name in ("googlenet", "inception_v3"):
        model = getattr(models, name)(weights=None, aux_logits=False, init_weights=True)
        return model, 299 if name == "inception_v3" else 224
    if name == "lraspp_mobilenet_v3_large":
        return Segmentation(segmentation.lraspp_mobilenet_v3_large(weights_backbone=None)), 224
    if name == "fcn_resnet50":
        model = segmentation.fcn_resnet50(weights_backbone=None, aux_loss=False)
        return Segmentation(model), 224
    return getattr(models, name)(weights=None), 224


def calibrate(model: nn.Module, size: int) -> bool:
    """Measure every batch norm's statistics on random data; False if it has none."""
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the batches
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 3, size, size))
    return bool(norms)


def export(model: nn.Module, size: int, path: Path) -> None:
    model.eval()
    options: dict[str, object] = dict(
        opset_version=17, do_constant_folding=True, input_names=["input"], output_names=["output"]
    )
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        options["dynamo"] = False
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(1, 3, size, size),), str(path), **options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write NAME.onnx to")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names")
    parser.add_argument("--calibrate", action="store_true", help="also write NAME_cal.onnx")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.models.split(","):
        torch.manual_seed(0)
        start = time.perf_counter()
        try:
            model, size = build(name)
            stem = name.removeprefix("timm:")
            export(model, size, args.out / f"{stem}.onnx")
            if args.calibrate and calibrate(model, size):
                export(model, size, args.out / f"{stem}_cal.onnx")
        except Exception as exc:  # an exporter's limits: reported, the others go on
            failed += 1
            print(f"FAILED {name}: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
            continue
        print(f"exported {name} ({size}x{size}) in {time.perf_counter() - start:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
