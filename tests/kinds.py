"""One realistic layer of each kind without weights, shared by the tests of the stages that
cost them: ResNet's max and global average pools, a residual add of two operands, YOLO's
upsample, a classifier's softmax, a standalone ReLU, a gated product of two feature maps."""

from __future__ import annotations

from autotune import Layer
from autotune.ir.layer import Activation, Epilogue

RELU = Activation("relu")
#: A fused conv epilogue: folded batch norm, residual add, ReLU.
BIAS_RESIDUAL_RELU = Epilogue(bias=True, residual=True, activation=RELU)

REALISTIC = {
    "maxpool": Layer("pool1", "maxpool", 112, 112, 64, 64, 3, 3, 2, 2, 1, 1, groups=64),
    "avgpool": Layer("gap", "avgpool", 7, 7, 2048, 2048, 7, 7, groups=2048),
    "add": Layer("add", "add", 56, 56, 512, 256, groups=256),
    "mul": Layer("glu", "mul", 28, 28, 512, 256, groups=256),
    "upsample": Layer("up", "upsample", 13, 13, 256, 256, groups=256, upscale=2),
    "softmax": Layer("prob", "softmax", 1, 1, 1000, 1000),
    "activation": Layer(
        "relu", "activation", 56, 56, 64, 64, groups=64, epilogue=Epilogue(activation=RELU)
    ),
}
