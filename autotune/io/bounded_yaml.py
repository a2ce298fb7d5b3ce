"""YAML that is refused while it is composed once it grows past the limits.

``yaml.safe_load`` builds the whole document before anyone can look at it, and aliases make
that document exponentially larger than its text: nine lines of "billion laughs" expand to
10**9 nodes. The loader here is ``SafeLoader`` with a composer that counts every node as it
is composed -- an alias by the expanded size of the node it refers to -- and stops at the
first node over ``MAX_YAML_NODES``, nested deeper than ``MAX_YAML_DEPTH``, with a scalar
longer than ``MAX_STRING_CHARS``, or an item past a sequence's cap (``max_items``: the
network's ``layers``). Refusals name the place as a path (``layers.3.in``) and, inside a
layer, the layer by its ``name`` when that was already read, else by its index.

Where PyYAML has its C extension the events come from libyaml, which is faster; composing,
counting and constructing stay in Python, so both give the same objects.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.events import AliasEvent, MappingEndEvent, ScalarEvent, SequenceEndEvent
from yaml.events import SequenceStartEvent as _SequenceStart
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autotune.io.errors import InputError
from autotune.io.limits import (
    MAX_NAME_CHARS,
    MAX_STRING_CHARS,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    too_large,
)

Label = str | int
#: sequence path -> (most items, the limit's name), e.g. {("layers",): (10000, "MAX_LAYERS")}
ItemCaps = Mapping[tuple[Label, ...], tuple[int, str]]


#: The refusal of an input nested deeper than ``MAX_YAML_DEPTH``.
TOO_DEEP = f"nested more than {MAX_YAML_DEPTH} levels deep (MAX_YAML_DEPTH, see 'Input limits')"


class _BoundedComposer(Composer):
    """PyYAML's composer in one recursive method that counts as it composes.

    Same nodes as ``Composer`` (tags, marks, styles, anchors, its errors for unknown and
    duplicate anchors); SafeLoader has no path resolvers, so descend/ascend are left out.
    One call per node and scalars resolved from a memo make it about twice as fast.
    """

    def _start_counting(self, max_items: ItemCaps) -> None:
        self._max_items = max_items
        self._nodes = 0
        self._depth = 0
        self._sizes: dict[str, int] = {}  # anchor -> node count with aliases expanded
        self._path: list[Label] = []  # keys and indices down to the node being composed
        self._parents: list[Node] = []  # the collection each path entry is inside
        self._resolved: dict[tuple[str, Any], str] = {}

    def _refuse(self, message: str) -> None:
        raise _LimitExceeded(message, tuple(self._path), self._layer_name())

    def _layer_name(self) -> str | None:
        """The ``name`` already composed in the layer being composed (``layers.N...``)."""
        path = self._path
        if len(path) < 3 or path[0] != "layers" or not isinstance(path[1], int):
            return None
        layer = self._parents[2]
        if not isinstance(layer, MappingNode):
            return None
        for key, value in layer.value:
            if key.value == "name" and isinstance(value, ScalarNode):
                return value.value if len(value.value) <= MAX_NAME_CHARS else None
        return None

    def _charge(self, nodes: int) -> None:
        self._nodes += nodes
        if self._nodes > MAX_YAML_NODES:
            self._refuse(
                f"the document expands to more than {MAX_YAML_NODES} nodes (MAX_YAML_NODES, "
                f"see 'Input limits'; an alias counts as the nodes it repeats)"
            )

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        """The root (``Composer.compose_document`` calls this once per document)."""
        return self._compose()

    def _compose(self) -> Node:
        """Compose the next node; ``self._path`` already leads to it."""
        event = self.get_event()
        if isinstance(event, AliasEvent):
            anchor = event.anchor
            if anchor not in self.anchors:
                raise ComposerError(
                    None, None, f"found undefined alias {anchor!r}", event.start_mark
                )
            if anchor not in self._sizes:
                self._refuse(f"alias *{anchor} refers to a node that contains it")
            self._charge(self._sizes[anchor])
            return self.anchors[anchor]
        anchor = event.anchor  # type: ignore[attr-defined]
        if anchor is not None and anchor in self.anchors:
            raise ComposerError(
                f"found duplicate anchor {anchor!r}; first occurrence",
                self.anchors[anchor].start_mark,
                "second occurrence",
                event.start_mark,
            )
        start = self._nodes
        self._charge(1)
        tag = event.tag  # type: ignore[attr-defined]
        if isinstance(event, ScalarEvent):
            value = event.value
            if len(value) > MAX_STRING_CHARS:
                message = too_large(
                    "string length", len(value), MAX_STRING_CHARS, "MAX_STRING_CHARS", " chars"
                )
                self._refuse(message)
            if tag is None or tag == "!":
                key = (value, event.implicit)
                tag = self._resolved.get(key)
                if tag is None:
                    tag = self._resolved[key] = self.resolve(ScalarNode, value, event.implicit)
            node: Node = ScalarNode(tag, value, event.start_mark, event.end_mark, style=event.style)
            if anchor is not None:
                self.anchors[anchor] = node
                self._sizes[anchor] = 1
            return node
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            self._refuse(TOO_DEEP)
        sequence = isinstance(event, _SequenceStart)
        kind = SequenceNode if sequence else MappingNode
        if tag is None or tag == "!":
            tag = self.resolve(kind, None, event.implicit)  # type: ignore[attr-defined]
        node = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)  # type: ignore[attr-defined]
        if anchor is not None:
            self.anchors[anchor] = node
        path, parents = self._path, self._parents
        if sequence:
            cap = self._max_items.get(tuple(path))
            path.append(0)
            parents.append(node)
            index = 0
            while not self.check_event(SequenceEndEvent):
                if cap is not None and index >= cap[0]:
                    path.pop()
                    raise _LimitExceeded(
                        f"more than {cap[0]} items ({cap[1]}, see 'Input limits')",
                        tuple(path),
                        None,
                    )
                path[-1] = index
                node.value.append(self._compose())
                index += 1
        else:
            parents.append(node)
            path.append("")
            while not self.check_event(MappingEndEvent):
                path.pop()  # a key's own path is its mapping's
                key = self._compose()
                path.append(str(key.value) if isinstance(key, ScalarNode) else "?")
                node.value.append((key, self._compose()))
        path.pop()
        parents.pop()
        node.end_mark = self.get_event().end_mark
        self._depth -= 1
        if anchor is not None:
            self._sizes[anchor] = self._nodes - start
        return node


class _LimitExceeded(Exception):
    def __init__(self, message: str, path: tuple[Label, ...], layer: str | None) -> None:
        super().__init__(message)
        self.message, self.path, self.layer = message, path, layer


class _PyLoader(_BoundedComposer, yaml.SafeLoader):
    def __init__(self, stream: str, max_items: ItemCaps) -> None:
        yaml.SafeLoader.__init__(self, stream)
        self._start_counting(max_items)


_Loader: type[Any] = _PyLoader
if getattr(yaml, "__with_libyaml__", False):

    class _CLoader(_BoundedComposer, yaml.CSafeLoader):  # type: ignore[misc,name-defined]
        """libyaml's parser for the events; this module's composer on top of it."""

        def __init__(self, stream: str, max_items: ItemCaps) -> None:
            yaml.CSafeLoader.__init__(self, stream)  # type: ignore[attr-defined]
            Composer.__init__(self)
            self._start_counting(max_items)

    _Loader = _CLoader


def load_yaml(
    text: str,
    path: str | Path,
    max_items: ItemCaps | None = None,
) -> Any:
    """Parse one YAML document within the limits, or raise ``InputError`` naming the place.

    ``max_items`` caps sequences by their path: ``{("layers",): (MAX_LAYERS, "MAX_LAYERS")}``
    refuses the 10 001st layer before composing it. A path inside ``layers`` is reported as
    that layer and the field below it.
    """
    loader = _Loader(text, max_items or {})
    collecting = gc.isenabled()
    # The node graph only grows while it is composed and has no cycles (a recursive alias
    # is refused), so the cyclic collector would rescan it again and again for nothing:
    # off, composing takes half the time. Reference counting still frees as usual.
    gc.disable()
    try:
        return loader.get_single_data()
    except _LimitExceeded as exc:
        layer, field = locate(exc.path, exc.layer)
        raise InputError(path, exc.message, layer=layer, field=field) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        if "nesting depth" in str(getattr(exc, "problem", "")):
            # libyaml's scanner (as PyYAML 6.0.4 ships it) reads ahead of the composer and
            # stops at its own depth of 1000 before this module sees the 33rd level.
            raise InputError(path, TOO_DEEP + where) from None
        raise InputError(path, f"not valid YAML{where}") from None
    except (ValueError, TypeError):  # an explicit tag on a value it cannot convert: !!int x
        raise InputError(path, "not valid YAML: a value does not fit its explicit tag") from None
    finally:
        loader.dispose()
        if collecting:
            gc.enable()


def locate(path: tuple[Label, ...], name: str | None) -> tuple[str | None, str | None]:
    """(layer, field) of a document path. Inside ``layers`` the layer is ``name`` (or ``#N``)
    and the field its key (``("layers", 3, "in", 0)``: ``#3``, ``in``); elsewhere the field is
    the path's first four keys (``parameters.clock.value``). Deeper parts of the path are
    left out: a nesting bomb's path is as long as the bomb."""
    parts = [str(p) for p in path if p != ""]
    if len(path) >= 2 and path[0] == "layers" and isinstance(path[1], int):
        return (name if name is not None else f"#{path[1]}"), (parts[2] if len(parts) > 2 else None)
    return None, (".".join(parts[:4]) or None)
