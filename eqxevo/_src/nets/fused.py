"""`PallasLayout`: a sparse policy's whole step (propagation, neurons, traces) in one
Pallas kernel. See docs/networks.md ("The fused Pallas kernel") for its design.
"""

from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._checks import optional_positive_int
from .._types import Array, Float
from .neurons import LIFNeurons, RateNeurons, lif_step, rate_step
from .plasticity import (
    AbstractRule,
    HebbianRule,
    PlasticState,
    STDPRule,
    bit_stream,
    element_bits,
    round_between,
    three_factor_update,
    widen,
)
from .propagate import GatherLayout
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
    value = optional_positive_int("block_size", value, "automatic")
    if value is not None and value & (value - 1):
        raise ValueError(
            f"block_size must be a power of two (Triton tiles are); got {value}"
        )
    return value


class PallasLayout(GatherLayout):
    """The gather layout's `[K, N_pad]` slots, stepped by one fused Pallas kernel.

    The tables are `GatherLayout`'s with the neuron axis padded to
    `N_pad = next_power_of_2(N)` (Triton loads power-of-two tiles only; padding
    columns are masked out); `currents`, `rate_step` and `spiking_step` run the
    kernel.

    Arguments:
        topology: the shared connectivity.
        block_size: genomes per program (a power of two), or None: the largest
            power of two dividing the population with `N_pad * B <= 4096` on GPU,
            the whole population's largest power-of-two factor in interpret mode.
        interpret: run the kernel in Pallas interpret mode. None (default):
            interpret on CPU, Triton on GPU; other backends raise.

    The population's block need not be a power of two: with P = 96 the programs
    take 32 genomes each, with an odd P one each (correct, slow).
    """

    name: ClassVar[str] = "pallas"
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
        super().__init__(topology)
        n = topology.num_neurons
        padded = next_power_of_2(n)
        columns = ((0, 0), (0, padded - n))
        # padding columns: source 0, edge 0, masked out (never read as an edge)
        self.src = jnp.pad(self.src, columns)
        self.edge = jnp.pad(self.edge, columns)
        self.mask = jnp.pad(self.mask, columns)
        self.num_padded = padded
        self.block_size = _block_size(block_size)
        self.interpret = interpret

    @property
    def native_shape(self) -> tuple[int, ...]:
        return (self.num_slots, self.num_padded)

    def post(self, x: Float[Array, "neurons batch"]) -> Float[Array, "1 padded batch"]:
        return self._pad(x)[None]

    def collect(
        self, values: Float[Array, "slots padded batch"]
    ) -> Float[Array, "neurons batch"]:
        return jnp.sum(values, axis=0)[: self.num_neurons]

    def currents(
        self,
        weights: Float[Array, "slots padded #batch"],
        x: Float[Array, " neurons #batch"],
    ) -> Float[Array, " neurons #batch"]:
        (current,) = self._call(_Config("propagate"), weights=weights, x=x)
        return current[: self.num_neurons]

    def rate_step(
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
        coefficients = ()
        if rule is not None:
            coefficients = (rule.a, rule.b, rule.c, rule.d, rule.learning_rate)
        inputs = _neuron_inputs(neurons, weights, rate, external, potential=potential)
        (potential, rate), plastic = self._step(
            config, rule, coefficients, plastic, inputs
        )
        return potential, rate, plastic

    def spiking_step(
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
        inputs = _neuron_inputs(
            neurons,
            weights,
            spikes,
            external,
            potential=potential,
            refractory=refractory,
        )
        coefficients = ()
        if rule is not None:
            assert pre_trace is not None and post_trace is not None
            coefficients = (rule.a_plus, rule.a_minus, rule.learning_rate)
            inputs |= {"pre_trace": pre_trace, "post_trace": post_trace}
        (potential, refractory, spikes), plastic = self._step(
            config, rule, coefficients, plastic, inputs
        )
        return potential, refractory, spikes, plastic

    def _step(
        self,
        config: "_Config",
        rule: AbstractRule | None,
        coefficients: tuple[Array, ...],
        plastic: PlasticState | None,
        inputs: dict[str, Array],
    ) -> tuple[list[Array], PlasticState | None]:
        """The kernel's neuron outputs (unpadded) and the new plastic state."""
        if rule is not None:
            assert plastic is not None
            inputs = inputs | _plastic_inputs(plastic, coefficients)
        outputs = self._call(config, **inputs)
        count = len(_NEURON_OUTPUTS[config.neurons])
        neuron_outputs = [y[: self.num_neurons] for y in outputs[:count]]
        # the activity (rate or spikes) is the last neuron output
        activity = neuron_outputs[-1]
        return neuron_outputs, _plastic_out(rule, plastic, outputs[count:], activity)

    def use_interpret(self) -> bool:
        """Whether the kernel runs in interpret mode on this backend (None: on CPU).

        Raises:
            ValueError: the default backend is neither CPU nor GPU.
        """
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

    def population_block(self, population: int, interpret: bool) -> int:
        """Genomes per kernel program: the largest power of two dividing
        `population` within `block_size` (or the tile budget on GPU)."""
        if self.block_size is not None:
            limit = self.block_size
        elif interpret:
            limit = population  # the grid is a sequential loop: few, large blocks
        else:
            limit = max(1, TILE_ELEMENTS // self.num_padded)
        # programs take equal blocks: the block must divide the population
        block = 1
        while block * 2 <= limit and population % (block * 2) == 0:
            block *= 2
        return block

    def _pad(self, x: Array) -> Array:
        # neuron arrays [N, ...] to [N_pad, ...]; padded neurons get zeros and
        # are never read back (their columns are masked out)
        extra = self.num_padded - x.shape[0]
        if extra == 0:
            return x
        return jnp.pad(x, ((0, extra),) + ((0, 0),) * (x.ndim - 1))

    def _call(self, config: "_Config", **arrays: Array) -> list[Array]:
        """Run the kernel over the population (the trailing axis of `arrays`)."""
        interpret = self.use_interpret()
        population = max(x.shape[-1] for x in arrays.values())
        block = self.population_block(population, interpret)
        k, n = self.num_slots, self.num_padded

        # Shared values (a size-1 batch axis: one genome's, or unbatched data)
        # are broadcast to the population: every program reads its own block.
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

        outputs = {
            name: neuron_out(dtype)
            for name, dtype in _NEURON_OUTPUTS[config.neurons].items()
        }
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
        # Pallas and its Triton dialect load here, not with the module: every
        # command imports the layouts, and only this path needs them.
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import triton as pltriton

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


# The kernel's per-neuron outputs `[N_pad, B]` for each kind of step, in order.
_NEURON_OUTPUTS: dict[str, dict[str, Any]] = {
    "propagate": {"current": jnp.float32},
    "rate": {"potential": jnp.float32, "rate": jnp.float32},
    "lif": {"potential": jnp.float32, "refractory": jnp.int32, "spikes": jnp.float32},
}


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


def _rule_config(rule: AbstractRule | None, dt: float) -> dict[str, Any]:
    if rule is None:
        return {}
    return {
        "rule": "hebbian" if isinstance(rule, HebbianRule) else "stdp",
        "modulator": rule.modulator if rule.modulation == "neuron" else None,
        "trace_decay": rule.eligibility_decay(dt),
        "bounds": rule.weight_bounds,
        "trace_dtype": rule.trace_dtype,
    }


def _neuron_inputs(
    neurons: RateNeurons | LIFNeurons,
    weights: Array,
    x: Array,
    external: Array,
    **state: Array,
) -> dict[str, Array]:
    """The kernel's inputs for a neuron update, by name, in its argument order."""
    inputs = {"weights": weights, "x": x, **state, "external": external}
    return inputs | {"bias": neurons.bias, "tau": neurons.tau}


def _plastic_inputs(
    plastic: PlasticState, coefficients: tuple[Array, ...]
) -> dict[str, Array]:
    """The kernel's plastic inputs; per-genome scalars become `[rows, B]` tables."""
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
    rule: AbstractRule | None,
    plastic: PlasticState | None,
    outputs: list[Array],
    activity: Array,
) -> PlasticState | None:
    """The new `PlasticState` from the kernel's trace (and weight) outputs."""
    if rule is None or plastic is None:
        return plastic
    trace, *weights = outputs
    modulation = rule.step_modulation(plastic.modulation, activity)
    return plastic.advanced(
        weights[0] if weights else plastic.weights, trace, modulation
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
    nearest32 = widen(nearest)
    up = value - nearest32 > 0
    pattern = lax.bitcast_convert_type(nearest, unsigned)
    one = jnp.ones((), unsigned)
    # sign-magnitude: one step of the bit pattern away from zero is +1
    away = up == (nearest32 > 0)
    stepped = jnp.where(away, pattern + one, pattern - one)
    # from (either) zero: the smallest subnormal of the residual's sign
    tiniest = jnp.where(
        up, jnp.asarray(0x0001, unsigned), jnp.asarray(0x8001, unsigned)
    )
    pattern = jnp.where(nearest32 == 0, tiniest, stepped)
    neighbour = lax.bitcast_convert_type(pattern, dtype)
    return round_between(value, nearest, neighbour, bits)


# -- the kernel ----------------------------------------------------------------------


def _make_kernel(config: _Config, in_names: list[str], out_names: list[str]) -> Any:
    """The kernel body for `config`; refs arrive in `in_names + out_names` order."""

    def kernel(*refs: Any) -> None:
        ins = dict(zip(in_names, refs[: len(in_names)], strict=True))
        outs = dict(zip(out_names, refs[len(in_names) :], strict=True))
        src, weights, x = ins["src"], ins["weights"], ins["x"]
        num_slots = src.shape[0]
        tile = x.shape

        # 1. propagation: the same slot order as GatherLayout.currents
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
                from jax.experimental.pallas import triton as pltriton

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
            stream = bit_stream(row(counters, 0), row(counters, 1))
            column = lax.broadcasted_iota(jnp.uint32, (tile[0], 1), 0)

            def store(k: Array, value: Array) -> Array:
                index = k.astype(jnp.uint32) * jnp.uint32(config.num_neurons) + column
                bits = element_bits(index, stream)
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
