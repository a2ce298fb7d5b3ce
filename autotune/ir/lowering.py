"""From a graph to the layers the tuner maps: folding, fusion, zero-copy concat and views.

KaNN (seed 003) folds batch norm and scale into the convolution, fuses activations and
eltwise adds into it and removes concat copies; so does this pass, and it says what it did
with every operator (``Fate``):

- ``folded``: a batch norm whose input is a conv or fc read by nothing else, and whose
  epilogue has no residual nor activation yet, becomes that layer's bias (its scale goes
  into the weights, its shift and the conv's own bias into the bias).
- ``fused``: an activation, or a two-operand add, becomes part of its producer's epilogue
  when the producer's output is read by nothing else (and is not a network output), in the
  epilogue's order (bias, residual, activation; or bias, activation, residual when the add
  follows the activation). An add fuses into the producer of its later operand when the
  other operand is computed before that producer runs ("ready").
- ``view``: ``flatten`` is the same bytes read with another shape (NCHW order); a ``slice``
  of channels is a channel range of its source's buffer (one contiguous block per image).
- ``concat``: producers write into channel slices of the concat's buffer (channel-major
  layout: a slice of channels is one contiguous block per image), so no copy is made. An
  operand that cannot be written in place (a network input, a view, a tensor already placed
  in another concat) is copied by a ``copy`` step: an ``upsample`` layer of scale 1. A
  concat whose operands are a run of another concat's (DenseNet's, before each layer of a
  block) is a ``view``: that range of the other's buffer.
- ``layer``: every other operator is a ``Step`` with its own ``Layer``: conv, fc, pools
  (global average pool: the ``avgpool`` whose kernel is the input), add, mul, activation,
  upsample, softmax, and a batch norm left standing (a depthwise 1×1 conv with a bias).
  A channel ``shuffle`` of ``g`` groups is a copy (an ``upsample`` of scale 1) whose operands
  are the ``g`` channel ranges of its input, read interleaved as an add's are: channel
  ``j·g + i`` of what it reads is channel ``j`` of group ``i``, which is the shuffle.
  A mul by a channel gate ``(1, 1, c)`` (squeeze-excitation) is a depthwise 1×1 conv whose
  filter is the gate: the step's ``gate`` names the tensor its executor reads the filter of
  each image from, and the plan places it as the step's weights stream. (At a batch tile of
  ``b`` images the model counts one image's gate, ``c`` words, where ``b`` are read: below
  ``1 / (h·w)`` of the input's words.)

Each step reads and writes ``TensorRef``s: a channel range of a stored ``Buffer``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from autotune.ir.graph import ACTIVATION_KINDS, Graph, GraphError, Operator, Shape
from autotune.ir.layer import Activation, Epilogue, Layer, LayerError

FateKind = Literal["layer", "folded", "fused", "view", "concat", "copy"]


@dataclass(frozen=True)
class Buffer:
    """A tensor stored in memory: a network input, a step's output or a concat's."""

    name: str
    shape: Shape
    producer: str | None  # the step or concat that fills it; None for a network input


@dataclass(frozen=True)
class TensorRef:
    """Channels ``offset … offset + stored[2] − 1`` of buffer ``buffer``, whose own volume is
    ``stored``; a consumer sees it as ``view`` (differs only behind a flatten)."""

    tensor: str
    buffer: str
    offset: int
    stored: Shape
    view: Shape


@dataclass(frozen=True)
class Step:
    """One mapped layer: the graph operator it implements, what was folded or fused into
    it (in order), the tensors it reads (``inputs``: its operands, several for an add or a
    mul; ``residual``: the epilogue's; ``gate``: a channel gate's), and where it writes."""

    layer: Layer
    inputs: tuple[TensorRef, ...]
    output: TensorRef
    residual: TensorRef | None = None
    absorbed: tuple[str, ...] = ()
    op: str = ""  # the graph operator; "" for a copy step
    gate: TensorRef | None = None  # a channel gate, the filter of each image (module docstring)
    #: the step this one absorbed (``autotune.ir.fusion``: a depthwise before a 1x1, or a
    #: 1x1 before a depthwise) as lowered alone, whose input this step now reads and whose
    #: weights and folded operators its fused layer computes with
    prologue: Step | None = None

    @property
    def name(self) -> str:
        return self.layer.name

    @property
    def shuffle_groups(self) -> int:
        """The channel groups a shuffle's copy reads interleaved (its operands); 0 for
        every other step (an add's operands are whole tensors)."""
        if self.op and self.layer.kind == "upsample" and len(self.inputs) > 1:
            return len(self.inputs)
        return 0


@dataclass(frozen=True)
class Fate:
    """What became of one graph operator: its own ``layer``; ``folded``/``fused`` into the
    step ``into``; a ``view`` of or a ``concat`` in buffer ``into``."""

    op: str
    kind: FateKind
    into: str


@dataclass(frozen=True)
class Lowering:
    """The graph's steps in execution order, the buffers they use, the fate of every
    operator, and the refs of the network's outputs."""

    steps: tuple[Step, ...]
    buffers: tuple[Buffer, ...]
    fates: tuple[Fate, ...]
    outputs: tuple[TensorRef, ...]
    inputs: tuple[TensorRef, ...] = field(default=())

    @property
    def layers(self) -> tuple[Layer, ...]:
        return tuple(step.layer for step in self.steps)

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    def buffer(self, name: str) -> Buffer:
        for buffer in self.buffers:
            if buffer.name == name:
                return buffer
        raise KeyError(name)


def activation_of(op: Operator) -> Activation:
    """The epilogue function of an activation operator."""
    if op.kind == "relu6":
        return Activation("clip", low=0.0, high=6.0)
    if op.kind == "clip":
        return Activation("clip", low=op.low, high=op.high)
    if op.kind == "leaky_relu":
        return Activation("leaky_relu", alpha=op.alpha)
    return Activation(op.kind)  # type: ignore[arg-type]


@dataclass
class _Draft:
    """A step while the pass decides what joins its epilogue."""

    op: Operator
    kind: str
    operands: tuple[str, ...]
    out_tensor: str
    index: int
    bias: bool = False
    residual: str | None = None
    activation: Activation | None = None
    absorbed: list[str] = field(default_factory=list)
    gate: str | None = None
    activation_first: bool = False

    @property
    def epilogue_empty(self) -> bool:
        return not self.bias and self.residual is None and self.activation is None


def lower(graph: Graph, fuse: bool = True) -> Lowering:
    """Fold, fuse and place the graph's operators (module docstring). Raises
    ``GraphError`` for an operator the tuner cannot map.

    ``fuse=False`` is the baseline without any of it: every operator its own layer (a batch
    norm a depthwise 1×1 conv, an add an add layer) and every concat operand copied, as a
    layer-by-layer runtime without a graph compiler would run it; for measuring what folding
    and fusion save."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    drafts: list[_Draft] = []
    producer: dict[str, _Draft] = {}  # tensor -> the draft whose epilogue yields it
    order: dict[str, int] = {name: -1 for name in graph.input_names}  # tensor -> ready at
    views: dict[str, str] = {}  # flatten output -> its source tensor
    slices: dict[str, tuple[str, int]] = {}  # slice output -> (its source, first channel)
    fates: dict[str, Fate] = {}

    def alone(tensor: str, reader: str) -> bool:
        return fuse and consumers.get(tensor) == (reader,) and tensor not in outputs

    def new_step(op: Operator, kind: str, operands: tuple[str, ...]) -> None:
        draft = _Draft(op, kind, operands, op.name, len(drafts), bias=op.bias)
        drafts.append(draft)
        producer[op.name] = draft
        order[op.name] = draft.index
        fates[op.name] = Fate(op.name, "layer", op.name)

    def absorb(draft: _Draft, op: Operator, how: FateKind) -> None:
        draft.absorbed.append(op.name)
        draft.out_tensor = op.name
        producer[op.name] = draft
        order[op.name] = draft.index
        fates[op.name] = Fate(op.name, how, draft.op.name)

    for op in graph.ops:
        src = op.inputs[0]
        head = producer.get(src)
        if head is not None and head.out_tensor != src:
            head = None
        if op.kind == "batchnorm":
            if (
                head is not None
                and head.kind in ("conv", "fc")
                and head.residual is None
                and head.activation is None
                and alone(src, op.name)
            ):
                head.bias = True
                absorb(head, op, "folded")
            else:
                new_step(op, "batchnorm", (src,))
        elif op.kind in ACTIVATION_KINDS:
            if head is not None and head.activation is None and alone(src, op.name):
                head.activation = activation_of(op)
                absorb(head, op, "fused")
            else:
                new_step(op, "activation", (src,))
                drafts[-1].activation = activation_of(op)
        elif op.kind == "add":
            fusion = _residual_target(op, producer, order, alone) if len(op.inputs) == 2 else None
            if fusion is not None:
                draft, other = fusion
                draft.residual = other
                draft.activation_first = draft.activation is not None
                absorb(draft, op, "fused")
            else:
                new_step(op, "add", op.inputs)
        elif op.kind == "mul":
            gate = graph.channel_gate(op)
            if gate is not None:
                new_step(op, "scale", (src,))
                drafts[-1].gate = gate
            else:
                new_step(op, "mul", op.inputs)
        elif op.kind == "flatten":
            views[op.name] = src
            order[op.name] = order[src]
            fates[op.name] = Fate(op.name, "view", src)
        elif op.kind == "slice":
            slices[op.name] = (src, op.channels[0])
            order[op.name] = order[src]
            fates[op.name] = Fate(op.name, "view", src)
        elif op.kind == "concat":
            order[op.name] = max(order[t] for t in op.inputs)
            fates[op.name] = Fate(op.name, "concat", op.name)
        else:
            new_step(op, op.kind, op.inputs)

    hosted = _concat_hosts(graph) if fuse else {}
    for concat, (host, offset) in hosted.items():
        slices[concat] = (host, offset)
        fates[concat] = Fate(concat, "view", host)
    copy_specs = _place_concats(graph, producer, consumers, hosted, in_place=fuse)
    placement = {target: slot for _, target, slot, _ in copy_specs}
    for source, target, _, after in sorted(copy_specs, key=lambda c: c[3], reverse=True):
        if target == source:
            continue
        # a copy has no operator of its own: it carries the graph's first, for its errors
        drafts.insert(after + 1, _Draft(graph.ops[0], "copy", (source,), target, after + 1))
    refs = _refs(graph, views, slices, placement, copy_specs)
    buffers = _buffers(graph, drafts, placement, refs)
    steps: list[Step] = []
    taken = {op.name for op in graph.ops} | set(graph.input_names)
    for draft in drafts:
        if draft.kind == "copy":
            name = _unique(f"{draft.out_tensor}", taken)
            src_ref = refs[draft.operands[0]]
            layer = _layer(draft, name, src_ref)
            steps.append(Step(layer, (src_ref,), refs[draft.out_tensor]))
            continue
        operands = tuple(refs[t] for t in draft.operands)
        if draft.kind == "shuffle":
            operands = _groups(draft.op, operands[0])
        residual = refs[draft.residual] if draft.residual is not None else None
        steps.append(
            Step(
                _layer(draft, draft.op.name, refs[draft.operands[0]], len(operands)),
                operands,
                refs[draft.out_tensor],
                residual,
                tuple(draft.absorbed),
                draft.op.name,
                refs[draft.gate] if draft.gate is not None else None,
            )
        )
    return Lowering(
        steps=tuple(steps),
        buffers=tuple(buffers),
        fates=tuple(fates[op.name] for op in graph.ops),
        outputs=tuple(refs[t] for t in graph.outputs),
        inputs=tuple(refs[t] for t in graph.input_names),
    )


def _residual_target(
    op: Operator,
    producer: dict[str, _Draft],
    order: dict[str, int],
    alone: Callable[[str, str], bool],
) -> tuple[_Draft, str] | None:
    """The step whose epilogue can take this two-operand add, and the other operand: the
    producer of the later operand, if its output is read only by the add, its epilogue has
    no residual yet (after an activation, the residual comes after it), and the other
    operand is ready before it runs."""
    a, b = op.inputs
    for at, mine, other in sorted(((order[a], a, b), (order[b], b, a)), reverse=True):
        draft = producer.get(mine)
        if (
            draft is not None
            and draft.out_tensor == mine
            and draft.residual is None
            and alone(mine, op.name)
            and order[other] < at
        ):
            return draft, other
    return None


#: (source tensor, tensor as stored in the concat, (concat, channel offset), draft index after
#: which a copy runs): ``source == target`` when the producer writes in place.
_CopySpec = tuple[str, str, tuple[str, int], int]


def _place_concats(
    graph: Graph,
    producer: dict[str, _Draft],
    consumers: dict[str, tuple[str, ...]],
    hosted: dict[str, tuple[str, int]],
    in_place: bool = True,
) -> list[_CopySpec]:
    """Where each concat operand lives: written in place into a channel slice of the
    concat's buffer when its producer can (a step's final output, or a concat, read by this
    concat only among concats and not yet placed), else copied there after it is ready.
    A ``hosted`` concat is a range of its host's buffer (``_concat_hosts``): it places
    nothing, and reading an operand does not count against it; as an operand it is a view,
    copied."""
    specs: list[_CopySpec] = []
    placed: set[str] = set()
    concats = [op for op in graph.ops if op.kind == "concat" and op.name not in hosted]
    names = {c.name for c in concats}
    for op in reversed(concats):  # outer concats first: a nested one becomes a slice
        offset = 0
        for tensor in op.inputs:
            draft = producer.get(tensor)
            writer_ok = (draft is not None and draft.out_tensor == tensor) or tensor in names
            concat_readers = [c for c in consumers.get(tensor, ()) if c in names]
            slot = (op.name, offset)
            if in_place and writer_ok and tensor not in placed and len(concat_readers) == 1:
                specs.append((tensor, tensor, slot, -1))
                placed.add(tensor)
            else:
                after = draft.index if draft is not None else _ready_index(graph, tensor, producer)
                specs.append((tensor, f"{tensor}@{op.name}", slot, after))
            offset += graph.shape(tensor)[2]
    return specs


def _concat_hosts(graph: Graph) -> dict[str, tuple[str, int]]:
    """Concats that are a channel range of another's buffer: each concat whose operands are
    a run of another concat's operands, in order, with its first channel there. DenseNet
    concatenates a block's input and every layer's output before each layer, and again,
    with one more, before the next: each of those concats is the first channels of the
    block's last one. Its operands are written once, into the host, and the concat is read
    in place (a view), not copied for every later layer.

    The host is the containing concat with the most operands (the first in the graph on a
    tie), and a host is never itself hosted: one that contained it would contain the concat
    and have more operands, or as many and come first."""
    concats = [op for op in graph.ops if op.kind == "concat"]
    rank = {op.name: (len(op.inputs), -i) for i, op in enumerate(concats)}
    hosts: dict[str, tuple[str, int]] = {}
    for op in concats:
        best: tuple[str, int] | None = None
        for host in concats:
            if rank[host.name] <= rank[op.name] or (
                best is not None and rank[host.name] <= rank[best[0]]
            ):
                continue
            offset = _run_offset(graph, op.inputs, host.inputs)
            if offset is not None:
                best = (host.name, offset)
        if best is not None:
            hosts[op.name] = best
    return hosts


def _run_offset(graph: Graph, run: tuple[str, ...], inputs: tuple[str, ...]) -> int | None:
    """First channel of ``run`` in the concat of ``inputs`` where they hold it as a
    contiguous run, in order (the first such); None if they do not."""
    n = len(run)
    offset = 0
    for start in range(len(inputs) - n + 1):
        if inputs[start : start + n] == run:
            return offset
        offset += graph.shape(inputs[start])[2]
    return None


def _ready_index(graph: Graph, tensor: str, producer: dict[str, _Draft]) -> int:
    """Index of the last draft a view or concat ``tensor`` waits for (-1: none)."""
    if tensor in graph.input_names:
        return -1
    op = graph.op(tensor)
    if tensor in producer:
        return producer[tensor].index
    return max((_ready_index(graph, t, producer) for t in op.inputs), default=-1)


def _channels(src: TensorRef, start: int, count: int, tensor: str, op: str) -> TensorRef:
    """Channels ``start … start + count − 1`` of ``src``, named ``tensor``: a range of its
    buffer (channel-major, one block per image), which a flatten's view is not."""
    if src.view != src.stored:
        raise GraphError(op, "inputs", "channels of a flattened tensor are not a range of it")
    shape = (src.stored[0], src.stored[1], count)
    return TensorRef(tensor, src.buffer, src.offset + start, shape, shape)


def _groups(op: Operator, src: TensorRef) -> tuple[TensorRef, ...]:
    """A shuffle's operands: the ``groups`` channel ranges of its input, in order."""
    size = src.stored[2] // op.groups
    return tuple(_channels(src, g * size, size, src.tensor, op.name) for g in range(op.groups))


def _refs(
    graph: Graph,
    views: dict[str, str],
    slices: dict[str, tuple[str, int]],
    placement: dict[str, tuple[str, int]],
    specs: list[_CopySpec],
) -> dict[str, TensorRef]:
    """Every tensor's ref: its own buffer, a slice of a concat's, a view of another, or a
    channel range of another's."""
    shapes = {name: shape for name, shape in graph.inputs}
    shapes.update({op.name: op.shape for op in graph.ops})
    for source, target, _, _ in specs:
        shapes[target] = shapes[source]
    refs: dict[str, TensorRef] = {}

    def resolve(tensor: str) -> TensorRef:
        if tensor in refs:
            return refs[tensor]
        shape = shapes[tensor]
        if tensor in placement:
            concat, offset = placement[tensor]
            base = resolve(concat)
            ref = TensorRef(tensor, base.buffer, base.offset + offset, shape, shape)
        elif tensor in views:
            source = resolve(views[tensor])
            ref = replace(source, tensor=tensor, view=shape)
        elif tensor in slices:
            name, start = slices[tensor]
            ref = _channels(resolve(name), start, shape[2], tensor, tensor)
        else:
            ref = TensorRef(tensor, tensor, 0, shape, shape)
        refs[tensor] = ref
        return ref

    for tensor in shapes:
        resolve(tensor)
    return refs


def _buffers(
    graph: Graph,
    drafts: list[_Draft],
    placement: dict[str, tuple[str, int]],
    refs: dict[str, TensorRef],
) -> list[Buffer]:
    """The stored tensors: network inputs, then in execution order each step's or concat's
    output that is not a slice of another buffer."""
    buffers = [Buffer(name, shape, None) for name, shape in graph.inputs]
    seen = {b.name for b in buffers}
    concat_ops = {op.name: op for op in graph.ops if op.kind == "concat"}
    writers = [d.out_tensor for d in drafts] + list(concat_ops)
    for tensor in writers:
        ref = refs[tensor]
        if tensor in placement or ref.buffer != tensor or tensor in seen:
            continue
        seen.add(tensor)
        buffers.append(Buffer(tensor, ref.stored, tensor))
    return buffers


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{n}"
    taken.add(candidate)
    return candidate


def _layer(draft: _Draft, name: str, src: TensorRef, operands: int = 1) -> Layer:
    """The ``Layer`` a draft step maps (module docstring of ``autotune.ir.layer``)."""
    op, kind = draft.op, draft.kind
    epilogue = Epilogue(
        bias=draft.bias,
        residual=draft.residual is not None,
        activation=draft.activation,
        activation_first=draft.activation_first,
    )
    h, w, c = src.view
    try:
        if kind == "conv":
            return Layer(
                name,
                "conv",
                h,
                w,
                c,
                op.out_channels,
                kernel_h=op.kernel[0],
                kernel_w=op.kernel[1],
                stride_h=op.stride[0],
                stride_w=op.stride[1],
                pad_h=op.padding[0],
                pad_w=op.padding[1],
                groups=op.groups,
                epilogue=epilogue,
                dilation_h=op.dilation[0],
                dilation_w=op.dilation[1],
                pad_bottom=None if op.padding_end is None else op.padding_end[0],
                pad_right=None if op.padding_end is None else op.padding_end[1],
            )
        if kind == "fc":
            # the kernel covers the stored volume: behind a flatten, the NCHW order of the
            # flattened words is the (c, kh, kw) order of the filter
            sh, sw, sc = src.stored
            return replace(Layer.fc(name, sh, sw, sc, op.out_channels), epilogue=epilogue)
        if kind == "batchnorm":  # left standing: a per-channel scale and shift
            return Layer(name, "conv", h, w, c, c, groups=c, epilogue=replace(epilogue, bias=True))
        if kind in ("maxpool", "avgpool", "global_avgpool"):
            kh, kw = (h, w) if kind == "global_avgpool" else op.kernel
            return Layer(
                name,
                "avgpool" if kind == "global_avgpool" else kind,  # type: ignore[arg-type]
                h,
                w,
                c,
                c,
                kernel_h=kh,
                kernel_w=kw,
                stride_h=1 if kind == "global_avgpool" else op.stride[0],
                stride_w=1 if kind == "global_avgpool" else op.stride[1],
                pad_h=0 if kind == "global_avgpool" else op.padding[0],
                pad_w=0 if kind == "global_avgpool" else op.padding[1],
                groups=c,
                ceil_mode=op.ceil_mode and kind != "global_avgpool",
                count_include_pad=op.count_include_pad,
                epilogue=epilogue,
            )
        if kind == "add":
            return Layer(name, "add", h, w, operands * c, c, groups=c, epilogue=epilogue)
        if kind == "mul":
            return Layer(name, "mul", h, w, operands * c, c, groups=c, epilogue=epilogue)
        if kind == "scale":  # by a channel gate: a depthwise 1×1 conv, the gate its filter
            return Layer(name, "conv", h, w, c, c, groups=c, epilogue=epilogue)
        if kind == "activation":
            return Layer(name, "activation", h, w, c, c, groups=c, epilogue=epilogue)
        if kind == "upsample":
            return Layer(
                name,
                "upsample",
                h,
                w,
                c,
                c,
                groups=c,
                upscale=op.scale,
                epilogue=epilogue,
                upsample_mode=op.mode,
            )
        if kind == "copy":
            return Layer(name, "upsample", h, w, c, c, groups=c)
        if kind == "shuffle":  # a copy of its channel groups read interleaved (docstring)
            return Layer(name, "upsample", h, w, c, c, groups=c, epilogue=epilogue)
        if kind == "softmax":
            return Layer(name, "softmax", h, w, c, c, epilogue=epilogue)
    except LayerError as exc:
        raise GraphError(op.name, exc.field, exc.reason) from None
    raise GraphError(op.name, "kind", f"no layer for a {kind} operator")
