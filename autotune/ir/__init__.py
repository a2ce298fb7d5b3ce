"""Intermediate representation: frozen dataclasses shared by every stage. Imports nothing else."""

from autotune.ir.layer import Layer, LayerError
from autotune.ir.machine import Level, Machine
from autotune.ir.mapping import ALGORITHMS, Buffers, Mapping, Tile
from autotune.ir.network import Network
from autotune.ir.precision import WORD_BYTES, word_bytes

__all__ = [
    "ALGORITHMS",
    "Buffers",
    "Layer",
    "LayerError",
    "Level",
    "Machine",
    "Mapping",
    "Network",
    "Tile",
    "WORD_BYTES",
    "word_bytes",
]
