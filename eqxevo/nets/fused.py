"""The fused Pallas step: propagation, neuron and trace updates in one kernel.

`PallasLayout` ("pallas") stores per-edge values like `GatherLayout` (fixed
in-degree, slot-major `[K, N]`), with the neuron axis padded to a power of two
(`[K, N_pad]`, `N_pad = next_power_of_2(N)`: Triton only loads power-of-two
tensors). A sparse policy on this layout runs each step as ONE `pallas_call`
over the population, whose axis is last (`batching.population_last`); one
program handles a block of genomes (`[N_pad, B]` tiles, B a power of two) and
does, without writing anything in between to memory:

1. propagation, slot by slot: `I += w[k] * x[src[k]]` (a row gather, no scatter);
2. the neuron update (`neurons.rate_step` or `neurons.lif_step`) on `I` plus the
   injected input current;
3. for a plastic network, a second sweep over the slots: the Hebbian (ABCD) or
   STDP increment, the eligibility-trace update `e <- lambda e + increment`
   (float32, or float16/bfloat16 with the same counter-based stochastic
   rounding as `plasticity.stochastic_round`), and, with `modulation="neuron"`,
   the three-factor weight update `w <- clip(w + eta m e)`.

The reward-modulated update (`policy.reinforce`) needs the environment's reward,
which only exists after the step: it stays the elementwise XLA update shared by
every layout (one fused loop over `w` and `e`; nothing to gain from Pallas).
The injected input, the readout and the STDP spike traces are `O(N)` per genome
and stay in XLA too.

Selecting it: `SparseRatePolicy(..., layout="pallas")` (or `SparseSpikingPolicy`,
`sparse_rate(..., layout="pallas")`, `[net.options] layout = "pallas"`), or
`layout="auto"` on a GPU. To set the block size or force interpret mode, swap
the layout in: `eqx.tree_at(lambda p: p.layout, policy, PallasLayout(topology,
block_size=32))`.

Why a layout and not a `fused=True` flag: the kernel needs its own native format
(padded, population-last tiles), and in eqxevo the layout is what fixes the
format of the plastic state; `choose_layout` is already the platform-aware rule,
so `layout="auto"` can pick the kernel on GPU with nothing else to configure, and
no meaningless combination (a fused dense layout, say) can be asked for.

Backends: on GPU the kernel is compiled by Pallas' Triton backend (it gathers
rows by index, which Triton does natively; Mosaic GPU is built around dense
TMA tiles). On CPU it runs in Pallas interpret mode, which is how the tests
check it against the NumPy reference and against the XLA gather layout;
interpret mode is for correctness only, never a speed figure. On GPU the kernel
is unmeasured so far (docs/performance.md, "Fused Pallas kernel").

Bits: the kernel evaluates the gather layout's expressions in the same order
(slot by slot, the same counter-based rounding bits), so with XLA contracting
no multiply-adds the two are bit-identical, 16-bit traces included. XLA:CPU on
an FMA machine contracts `a * b + c` where its fusions allow, and the kernel's
fusions differ from the gather path's: there they agree to float32 rounding,
as any two XLA programs of the same maths do (tests/test_nets_fused.py).
"""

import math
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from .._types import Array, Bool, Float, Int
from .neurons import LIFNeurons, RateNeurons, lif_step, rate_step
from .plasticity import (
    HebbianRule,
    PlasticState,
    STDPRule,
    _mix32,  # the counter hash of `random_bits`: the kernel draws the same bits
    three_factor_update,
)
from .propagate import AbstractLayout, GatherLayout, _masked
from .topology import Topology

# Largest tile (neurons x genomes) one GPU program holds when `block_size` is not
# given: 4096 float32 values is 32 per thread at Triton's default 4 warps.
# Unmeasured; tune with `block_size`.
TILE_ELEMENTS = 4096
# Triton's default warp count; a program's tiles are small.
NUM_WARPS = 4


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1)."""
    return 1 << max(0, n - 1).bit_length()


def _block_size(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"block_size must be None or a positive int; got {value!r}")
    if value & (value - 1):
        raise ValueError(
            f"block_size must be a power of two (Triton tiles are); got {value}"
        )
    return value


class PallasLayout(AbstractLayout):
    """Fixed in-degree `[K, N_pad]` stepped by one fused Pallas kernel.

    Arguments:
        topology: the shared connectivity.
        block_size: genomes per program (a power of two), or None: the largest
            power of two dividing the population with `N_pad * B <= 4096` on GPU,
            the whole population's largest power-of-two factor in interpret mode.
        interpret: run the kernel in Pallas interpret mode. None (default):
            interpret on CPU, Triton on GPU; other backends raise.

    Native values are `[K, N_pad]` (padding slots and columns masked out); the
    population's block need not be a power of two: with P = 96 the programs take
    32 genomes each, with an odd P one each (correct, slow).
    """

    name: ClassVar[str] = "pallas"
    population_last: ClassVar[bool] = True
    src: Int[Array, "slots padded"]
    edge: Int[Array, "slots padded"]
    mask: Bool[Array, "slots padded"]
    edge_slot: Int[Array, " edges"]
    edge_dst: Int[Array, " edges"]
    edge_mask: Bool[Array, " edges"]
    num_neurons: int = eqx.field(static=True)
    num_edges: int = eqx.field(static=True)
    num_slots: int = eqx.field(static=True)
    num_padded: int = eqx.field(static=True)
    block_size: int | None = eqx.field(static=True)
    interpret: bool | None = eqx.field(static=True)

    def __init__(
        self,
        topology: Topology,
        *,
        block_size: int | None = None,
        interpret: bool | None = None,
    ):
        if interpret is not None and not isinstance(interpret, bool):
            raise ValueError(f"interpret must be None or a bool; got {interpret!r}")
        gather = GatherLayout(topology)
        n = topology.num_neurons
        padded = next_power_of_2(n)
        columns = ((0, 0), (0, padded - n))
        # padding columns: source 0, edge 0, masked out (never read as an edge)
        self.src = jnp.pad(gather.src, columns)
        self.edge = jnp.pad(gather.edge, columns)
        self.mask = jnp.pad(gather.mask, columns)
        self.edge_slot, self.edge_dst = gather.edge_slot, gather.edge_dst
        self.edge_mask = gather.edge_mask
        self.num_neurons, self.num_edges = n, topology.num_edges
        self.num_slots, self.num_padded = gather.num_slots, padded
        self.block_size = _block_size(block_size)
        self.interpret = interpret

    @property
    def native_shape(self) -> tuple[int, ...]:
        return (self.num_slots, self.num_padded)

    def native_weights(
        self, weights: Float[Array, " edges"]
    ) -> Float[Array, "slots padded"]:
        return self._native(weights[:, None])[..., 0]

    def edge_values(
        self, native: Float[Array, "slots padded"]
    ) -> Float[Array, " edges"]:
        return _masked(self.edge_mask, native[self.edge_slot, self.edge_dst])

    def native_mask(self) -> Bool[Array, "slots padded"]:
        return self.mask

    # -- trailing-batch internals (XLA; the step itself runs in the kernel) -------

    def _native(self, weights: Array) -> Array:
        return _masked(self.mask[..., None], weights[self.edge])

    def _pre(self, x: Array) -> Array:
        return x[self.src]

    def _post(self, x: Array) -> Array:
        return self._pad(x)[None]

    def _collect(self, values: Array) -> Array:
        return jnp.sum(values, axis=0)[: self.num_neurons]

    def _propagate(self, weights: Array, x: Array) -> Array:
        (current,) = self._call(_Config("propagate"), weights=weights, x=x)
        return current[: self.num_neurons]

    def _propagate_pre(self, weights: Array, x: Array) -> tuple[Array, Array]:
        return self._propagate(weights, x), self._pre(x)

    def _rate_step(
        self,
        neurons: RateNeurons,
        rule: HebbianRule | None,
        weights: Array,
        potential: Array,
        rate: Array,
        external: Array,
        plastic: PlasticState | None,
    ) -> tuple[Array, Array, PlasticState | None]:
        """One fused rate-network step: `(potential, rate, plastic)`, all `[..., B]`.

        `external` is the injected input current `[N, B]`; `weights` the native
        weights (`plastic.weights` for a plastic network).
        """
        config = _Config("rate", dt=neurons.dt, **_rule_config(rule, neurons.dt))
        inputs: dict[str, Array] = {
            "weights": weights,
            "x": rate,
            "potential": potential,
            "external": external,
            "bias": neurons.bias,
            "tau": neurons.tau,
        }
        if rule is not None:
            assert plastic is not None
            coefficients = (rule.a, rule.b, rule.c, rule.d, rule.learning_rate)
            inputs |= _plastic_inputs(plastic, coefficients)
        potential, rate, *rest = self._call(config, **inputs)
        potential, rate = potential[: self.num_neurons], rate[: self.num_neurons]
        return potential, rate, _plastic_out(rule, plastic, rest, rate)

    def _spiking_step(
        self,
        neurons: LIFNeurons,
        rule: STDPRule | None,
        weights: Array,
        potential: Array,
        refractory: Array,
        spikes: Array,
        external: Array,
        pre_trace: Array | None,
        post_trace: Array | None,
        plastic: PlasticState | None,
    ) -> tuple[Array, Array, Array, PlasticState | None]:
        """One fused LIF step: `(potential, refractory, spikes, plastic)`.

        The STDP spike traces `pre_trace`/`post_trace` are read (the values before
        this step's spikes) but not advanced: that is elementwise, left to XLA.
        """
        config = _Config(
            "lif",
            dt=neurons.dt,
            threshold=neurons.threshold,
            reset=neurons.reset,
            refractory_steps=neurons.refractory_steps,
            **_rule_config(rule, neurons.dt),
        )
        inputs: dict[str, Array] = {
            "weights": weights,
            "x": spikes,
            "potential": potential,
            "refractory": refractory,
            "external": external,
            "bias": neurons.bias,
            "tau": neurons.tau,
        }
        if rule is not None:
            assert plastic is not None
            assert pre_trace is not None and post_trace is not None
            coefficients = (rule.a_plus, rule.a_minus, rule.learning_rate)
            inputs |= {"pre_trace": pre_trace, "post_trace": post_trace}
            inputs |= _plastic_inputs(plastic, coefficients)
        potential, refractory, spikes, *rest = self._call(config, **inputs)
        n = self.num_neurons
        potential, refractory, spikes = potential[:n], refractory[:n], spikes[:n]
        return potential, refractory, spikes, _plastic_out(rule, plastic, rest, spikes)

    # -- the pallas_call ------------------------------------------------------------

    def _use_interpret(self) -> bool:
        if self.interpret is not None:
            return self.interpret
        platform = jax.default_backend()
        if platform in ("cpu", "gpu"):
            return platform == "cpu"
        raise ValueError(
            "layout='pallas' runs on GPU (Pallas Triton) or, in interpret mode, on "
            f"CPU; the default backend is {platform!r}. Use layout='gather' there "
            "(or PallasLayout(..., interpret=True) to check results, slowly)."
        )

    def _population_block(self, population: int, interpret: bool) -> int:
        if self.block_size is not None:
            limit = self.block_size
        elif interpret:
            limit = population  # the grid is a sequential loop: few, large blocks
        else:
            limit = max(1, TILE_ELEMENTS // self.num_padded)
        block = 1
        while block * 2 <= limit and population % (block * 2) == 0:
            block *= 2
        return block

    def _pad(self, x: Array) -> Array:
        extra = self.num_padded - x.shape[0]
        if extra == 0:
            return x
        return jnp.pad(x, ((0, extra),) + ((0, 0),) * (x.ndim - 1))

    def _call(self, config: "_Config", **arrays: Array) -> list[Array]:
        """Run the kernel over the population (the trailing axis of `arrays`)."""
        interpret = self._use_interpret()
        population = max(x.shape[-1] for x in arrays.values())
        block = self._population_block(population, interpret)
        k, n = self.num_slots, self.num_padded

        def full(x: Array, shape: tuple[int, ...]) -> Array:
            return jnp.broadcast_to(x, (*shape, population))

        # name -> (array, block shape, index map); tables are shared by all programs
        inputs: dict[str, tuple[Array, tuple[int, ...], Any]] = {
            "src": (self.src, (k, n), lambda i: (0, 0)),
            "mask": (self.mask, (k, n), lambda i: (0, 0)),
        }
        for name, x in arrays.items():
            if name in ("weights", "trace"):
                inputs[name] = (full(x, (k, n)), (k, n, block), lambda i: (0, 0, i))
            elif name in ("coefficients", "counters"):
                rows = x.shape[0]
                inputs[name] = (full(x, (rows,)), (rows, block), lambda i: (0, i))
            else:  # per neuron
                x = full(self._pad(x), (n,))
                inputs[name] = (x, (n, block), lambda i: (0, i))

        def neuron_out(dtype: Any) -> jax.ShapeDtypeStruct:
            return jax.ShapeDtypeStruct((n, population), dtype)

        outputs: dict[str, jax.ShapeDtypeStruct] = {}
        if config.neurons == "propagate":
            outputs["current"] = neuron_out(jnp.float32)
        elif config.neurons == "rate":
            outputs["potential"] = neuron_out(jnp.float32)
            outputs["rate"] = neuron_out(jnp.float32)
        else:
            outputs["potential"] = neuron_out(jnp.float32)
            outputs["refractory"] = neuron_out(jnp.int32)
            outputs["spikes"] = neuron_out(jnp.float32)
        if config.rule != "none":
            trace = inputs["trace"][0]
            outputs["trace"] = jax.ShapeDtypeStruct(trace.shape, trace.dtype)
        if config.modulator is not None:
            outputs["weights"] = jax.ShapeDtypeStruct((k, n, population), jnp.float32)
        out_block = {"trace": (k, n, block), "weights": (k, n, block)}
        out_map = {"trace": lambda i: (0, 0, i), "weights": lambda i: (0, 0, i)}

        in_names = list(inputs)
        out_names = list(outputs)
        # update the plastic state in place
        aliases = {
            in_names.index(name): out_names.index(name)
            for name in ("trace", "weights")
            if name in outputs
        }
        kernel = _make_kernel(
            config._replace(num_neurons=self.num_neurons, barrier=not interpret),
            in_names,
            out_names,
        )
        call = pl.pallas_call(
            kernel,
            grid=(population // block,),
            in_specs=[
                pl.BlockSpec(shape, index) for _, shape, index in inputs.values()
            ],
            out_specs=[
                pl.BlockSpec(
                    out_block.get(name, (n, block)),
                    out_map.get(name, lambda i: (0, i)),
                )
                for name in out_names
            ],
            out_shape=list(outputs.values()),
            input_output_aliases=aliases,
            interpret=interpret,
            compiler_params=pltriton.CompilerParams(num_warps=NUM_WARPS),
            name=f"eqxevo_fused_{config.neurons}_{config.rule}",
        )
        return list(call(*(x for x, _, _ in inputs.values())))


# -- kernel configuration -----------------------------------------------------------


class _Config(NamedTuple):
    """Static configuration of one kernel (hashable: part of the traced program)."""

    neurons: str  # "propagate" (currents only), "rate" or "lif"
    rule: str = "none"  # "none", "hebbian" or "stdp"
    modulator: int | None = None  # neuron-modulated weight update in the kernel
    num_neurons: int = 0
    dt: float = 1.0
    threshold: float = 1.0
    reset: float = 0.0
    refractory_steps: int = 0
    trace_decay: float = 0.0
    bounds: tuple[float, float] = (0.0, 0.0)
    trace_dtype: str = "float32"
    barrier: bool = False  # a CTA barrier before re-reading this step's spikes


def _rule_config(rule: HebbianRule | STDPRule | None, dt: float) -> dict[str, Any]:
    if rule is None:
        return {}
    if isinstance(rule, HebbianRule):
        kind, decay = "hebbian", rule.trace_decay
    else:  # as in sparse._spiking_step
        kind, decay = "stdp", math.exp(-dt / rule.tau_eligibility)
    return {
        "rule": kind,
        "modulator": rule.modulator if rule.modulation == "neuron" else None,
        "trace_decay": decay,
        "bounds": rule.weight_bounds,
        "trace_dtype": rule.trace_dtype,
    }


def _plastic_inputs(
    plastic: PlasticState, coefficients: tuple[Array, ...]
) -> dict[str, Array]:
    per_genome = (*coefficients, plastic.seed, plastic.step)
    batch = max(jnp.shape(c)[-1] if jnp.ndim(c) else 1 for c in per_genome)
    rows = [jnp.broadcast_to(c, (batch,)) for c in coefficients]
    counters = [jnp.broadcast_to(c, (batch,)) for c in (plastic.seed, plastic.step)]
    return {
        "trace": plastic.trace,
        "coefficients": jnp.stack(rows),
        "counters": jnp.stack(counters),
    }


def _plastic_out(
    rule: HebbianRule | STDPRule | None,
    plastic: PlasticState | None,
    outputs: list[Array],
    activity: Array,
) -> PlasticState | None:
    """The new `PlasticState` from the kernel's trace (and weight) outputs."""
    if rule is None or plastic is None:
        return plastic
    trace, *weights = outputs
    modulation = plastic.modulation
    if rule.modulation == "neuron":
        assert rule.modulator is not None
        modulation = activity[rule.modulator]
    return PlasticState(
        weights=weights[0] if weights else plastic.weights,
        trace=trace,
        modulation=modulation,
        baseline=plastic.baseline,
        seed=plastic.seed,
        step=plastic.step + jnp.uint32(1),
    )


# -- stochastic rounding without nextafter ------------------------------------------


def round_stochastically(
    value: Float[Array, "*shape"], dtype: Any, bits: Array
) -> Array:
    """`plasticity.stochastic_round` for float16/bfloat16, bit for bit, in bit ops.

    Triton has no 16-bit `nextafter`; the neighbour away from the nearest value
    is one step of its bit pattern instead (sign-magnitude: +1 away from zero,
    -1 towards it; from zero, the smallest subnormal of the residual's sign).
    The result equals `stochastic_round(value, dtype, bits)` wherever that picks
    the neighbour, i.e. wherever the gap is finite and non-zero.
    """
    dtype = jnp.dtype(dtype)
    unsigned = jnp.uint16
    nearest = value.astype(dtype)
    nearest32 = nearest.astype(jnp.float32)
    residual = value - nearest32
    up = residual > 0
    pattern = lax.bitcast_convert_type(nearest, unsigned)
    one = jnp.ones((), unsigned)
    away = up == (nearest32 > 0)
    stepped = jnp.where(away, pattern + one, pattern - one)
    tiniest = jnp.where(
        up, jnp.asarray(0x0001, unsigned), jnp.asarray(0x8001, unsigned)
    )
    pattern = jnp.where(nearest32 == 0, tiniest, stepped)
    neighbour = lax.bitcast_convert_type(pattern, dtype)
    gap = neighbour.astype(jnp.float32) - nearest32
    usable = jnp.isfinite(gap) & (gap != 0) & jnp.isfinite(value)
    probability = jnp.where(usable, residual / jnp.where(usable, gap, 1.0), 0.0)
    uniform = (bits >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)
    return jnp.where(uniform < probability, neighbour, nearest)


# -- the kernel ----------------------------------------------------------------------


def _make_kernel(config: _Config, in_names: list[str], out_names: list[str]) -> Any:
    """The kernel body for `config`; refs arrive in `in_names + out_names` order."""

    def kernel(*refs: Any) -> None:
        ins = dict(zip(in_names, refs[: len(in_names)], strict=True))
        outs = dict(zip(out_names, refs[len(in_names) :], strict=True))
        src, weights, x = ins["src"], ins["weights"], ins["x"]
        num_slots = src.shape[0]
        tile = x.shape

        # 1. propagation: the same slot order as GatherLayout._propagate
        def propagate_slot(k: Array, acc: Array) -> Array:
            return acc + weights[k] * x[src[k], :]

        current = lax.fori_loop(
            0, num_slots, propagate_slot, jnp.zeros(tile, jnp.float32)
        )
        if config.neurons == "propagate":
            outs["current"][...] = current
            return

        # 2. the neuron update
        current = current + ins["external"][...]
        bias, tau = ins["bias"][...], ins["tau"][...]
        if config.neurons == "rate":
            potential, activity = rate_step(
                ins["potential"][...], current, bias, tau, config.dt
            )
            outs["potential"][...] = potential
            outs["rate"][...] = activity
        else:
            potential, refractory, activity = lif_step(
                ins["potential"][...],
                ins["refractory"][...],
                current,
                bias,
                tau,
                config.dt,
                config.threshold,
                config.reset,
                config.refractory_steps,
            )
            outs["potential"][...] = potential
            outs["refractory"][...] = refractory
            outs["spikes"][...] = activity
        if config.rule == "none":
            return

        # 3. eligibility traces (and the neuron-modulated weight update)
        coefficients = ins["coefficients"]

        def row(ref: Any, i: int) -> Array:
            return ref[i : i + 1, :]  # [1, B]: one value per genome

        learning_rate = row(coefficients, coefficients.shape[0] - 1)
        if config.modulator is not None:
            # activity[modulator] as a masked sum: exact (one non-zero term), and
            # Triton has no slicing of a loaded tile
            ids = lax.broadcasted_iota(jnp.int32, tile, 0)
            modulation = jnp.sum(
                jnp.where(ids == config.modulator, activity, 0.0),
                axis=0,
                keepdims=True,
            )
        else:
            modulation = None
        if config.rule == "hebbian":
            a, b, c, d = (row(coefficients, i) for i in range(4))

            def increment(source: Array) -> Array:
                pre = x[source, :]
                return a * pre * activity + b * pre + c * activity + d

        else:
            a_plus, a_minus = row(coefficients, 0), row(coefficients, 1)
            pre_trace, post_trace = ins["pre_trace"], ins["post_trace"][...]
            spikes = outs["spikes"]  # this step's spikes, gathered by source
            if config.barrier:
                # every thread of the program must see the whole spike tile
                pltriton.debug_barrier()

            def increment(source: Array) -> Array:
                return (
                    a_plus * pre_trace[source, :] * activity
                    - a_minus * post_trace * spikes[source, :]
                )

        trace_dtype = jnp.dtype(config.trace_dtype)
        if trace_dtype == jnp.float32:

            def store(k: Array, value: Array) -> Array:
                del k
                return value

        else:
            # random_bits(seed, step, native_shape), element (k, n) of the unpadded
            # [K, N] grid, so 16-bit traces match the gather layout's bit for bit
            counters = ins["counters"]
            seed, step = row(counters, 0), row(counters, 1)
            stream = _mix32(
                seed ^ _mix32(step * jnp.uint32(0x9E3779B9) + jnp.uint32(1))
            )
            column = lax.broadcasted_iota(jnp.uint32, (tile[0], 1), 0)

            def store(k: Array, value: Array) -> Array:
                index = k.astype(jnp.uint32) * jnp.uint32(config.num_neurons) + column
                bits = _mix32(index * jnp.uint32(0x85EBCA6B) ^ stream)
                return round_stochastically(value, trace_dtype, bits)

        trace_in, trace_out = ins["trace"], outs["trace"]

        def plastic_slot(k: Array, carry: None) -> None:
            value = config.trace_decay * trace_in[k].astype(jnp.float32)
            trace = store(k, value + increment(src[k]))
            trace_out[k] = trace
            if modulation is not None:
                outs["weights"][k] = three_factor_update(
                    weights[k],
                    trace,
                    modulation,
                    learning_rate,
                    config.bounds,
                    ins["mask"][k][:, None],
                )
            return carry

        lax.fori_loop(0, num_slots, plastic_slot, None)

    return kernel


__all__ = ["PallasLayout", "next_power_of_2", "round_stochastically"]
