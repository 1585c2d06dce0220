"""Device meshes, population sharding, and multi-host runs on JAX's distributed runtime.

See docs/internals.md ("Sharding") for what is split, what is replicated, and why.
"""

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from ._checks import optional_positive_int, positive_int

_Tree = TypeVar("_Tree")
_Out = TypeVar("_Out")

POPULATION_AXIS = "population"
"""Name of the mesh axis `population_mesh` builds."""


def population_mesh(devices: Sequence[Any] | None = None) -> Mesh:
    """A one-axis mesh (axis `"population"`) to shard the population over.

    Arguments:
        devices: the `jax.Device`s, in order; default `jax.devices()`, every device of
            every process (after `initialize_distributed`, the global set).

    Returns:
        A `jax.sharding.Mesh` with `Auto` axis type (the partitioner places
        whatever eqxevo does not place itself).

    Example:
        >>> mesh = eqxevo.population_mesh()
        >>> eqxevo.evolve(key, strategy, fitness_fn, num_generations=50, mesh=mesh)
    """
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices: need at least one device; got an empty sequence")
    return jax.make_mesh(
        (len(devices),),
        (POPULATION_AXIS,),
        axis_types=(AxisType.Auto,),
        devices=devices,
    )


def use_cpu_devices(num_devices: int | None = None) -> None:
    """Expose the host CPU as `num_devices` JAX devices (default: one per core).

    XLA runs a CPU program on one thread; a population sharded over N host
    devices runs on N cores. Call this right after `import jax`, before any JAX
    operation (it sets `jax_num_cpu_devices`; the flag
    `--xla_force_host_platform_device_count` does the same from the environment).

    Raises:
        RuntimeError: JAX has already started its backends.
    """
    count = optional_positive_int("num_devices", num_devices, "one per core")
    jax.config.update("jax_num_cpu_devices", count or os.cpu_count() or 1)


def device_mesh(devices: int) -> Mesh | None:
    """A population mesh over the first `devices` devices (None for one): the
    `--devices N` of `eqxevo run` and `eqxevo study run`. On a CPU, before JAX
    starts, each core becomes a device (`use_cpu_devices`).

    Raises:
        ValueError: fewer than `devices` devices (or cores) here; names the limit.
    """
    devices = positive_int("devices", devices)
    if devices == 1:
        return None
    # Only before JAX has started: then each core becomes a device. In-process
    # (tests, notebooks) JAX may be up already; its devices are what there is.
    started = False
    try:
        use_cpu_devices(devices)
    except RuntimeError:  # JAX already started (in-process use): keep its devices
        started = True
    available = jax.devices()
    if started:
        limit, what = len(available), "JAX devices in this process (JAX had started)"
    elif available[0].platform == "cpu":
        limit, what = _cores(), "CPU cores"
    else:
        limit, what = len(available), f"{available[0].platform.upper()} devices"
    if devices > limit or len(available) < devices:
        raise ValueError(
            f"--devices {devices}: this machine has {limit} {what}; allowed: 1 to "
            f"{limit}"
        )
    return population_mesh(available[:devices])


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: int | Sequence[int] | None = None,
    cpu_collectives: str | None = "gloo",
    initialization_timeout: int = 300,
) -> Mesh:
    """Join a multi-process run and return the global population mesh.

    Every process calls this once, before any other JAX operation, then runs
    the same program: `evolve(..., mesh=mesh)` shards the population over the
    devices of all processes and every process receives the same results.

    Arguments:
        coordinator_address: `"host:port"` of process 0. With the other
            arguments left None, JAX detects them on SLURM, Open MPI, Kubernetes
            and Cloud TPU (see `jax.distributed.initialize`).
        num_processes: how many processes take part.
        process_id: this process's index, 0..num_processes-1.
        local_device_ids: restrict this process to these local devices (e.g.
            one GPU per process).
        cpu_collectives: the CPU collectives implementation (`"gloo"` or
            `"mpi"`), needed for CPU devices to talk across processes; None
            leaves JAX's setting alone. GPU and TPU devices use their own.
        initialization_timeout: seconds to wait for every process to join.

    Returns:
        `population_mesh()` over `jax.devices()`, the devices of every process.

    Example (two processes on one machine, CPU):
        >>> mesh = eqxevo.initialize_distributed("localhost:1234", 2, process_id)
    """
    if cpu_collectives is not None:
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address,
        num_processes,
        process_id,
        local_device_ids=local_device_ids,
        initialization_timeout=initialization_timeout,
    )
    return population_mesh()


def mesh_size(mesh: Mesh | None) -> int:
    """Number of devices the population is split over (1 without a mesh)."""
    return 1 if mesh is None else int(mesh.size)


def check_divisible(name: str, size: int, num_devices: int) -> None:
    """Raise a clear error when `size` genomes cannot be split over `num_devices`."""
    count = num_devices
    # Blocks must be equal: shard_map splits an axis into D equal parts.
    if size % count:
        lower = size - size % count
        raise ValueError(
            f"{name}={size} must be divisible by the number of devices in the mesh "
            f"({count}) to shard the population evenly; use a multiple of {count} "
            f"(e.g. {lower or count} or {lower + count}) or a mesh over fewer devices"
        )


def topology(mesh: Mesh | None) -> dict[str, Any]:
    """A small, loggable description of where a run executes (devices, processes)."""
    devices = jax.devices()[:1] if mesh is None else list(mesh.devices.flat)
    return {
        "platform": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "num_devices": len(devices),
        "num_processes": len({d.process_index for d in devices}),
        "mesh_axes": None if mesh is None else dict(mesh.shape),
    }


def _population_spec(mesh: Mesh) -> PartitionSpec:
    # The population axis is split over every axis of the mesh, so a user's
    # multi-axis mesh (hosts x devices, say) works unchanged.
    return PartitionSpec(tuple(mesh.axis_names))


def replicate(tree: _Tree, mesh: Mesh | None) -> _Tree:
    """Place every array of `tree` on every device of `mesh` (host values in).

    Outside `jit` only. With several processes each one passes its own copy,
    which must be the same everywhere (true of keys, `Strategy.init` output and
    anything else computed by the same program from the same key).
    """
    if mesh is None:
        return tree
    sharding = NamedSharding(mesh, PartitionSpec())
    local_only = all(d.process_index == jax.process_index() for d in mesh.devices.flat)

    def put(x: Any) -> Any:
        if local_only:  # one process owns every device: a plain put suffices
            return jax.device_put(x, sharding)
        # Typed keys have no buffer of their own: place their key data, rewrap.
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = put(jax.random.key_data(x))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        # Not jax.device_put: across processes it checks that the values agree
        # and treats NaN (in evosax's initial states) as disagreeing.
        local = np.asarray(x)
        return jax.make_array_from_callback(
            local.shape, sharding, lambda index: local[index]
        )

    dynamic, static = eqx.partition(tree, eqx.is_array)
    return eqx.combine(jtu.tree_map(put, dynamic), static)


def _manual(mesh: Mesh) -> bool:
    """Whether we are tracing inside a `shard_map` over every axis of `mesh`."""
    manual = set(jax.sharding.get_abstract_mesh().manual_axes)
    return set(mesh.axis_names) <= manual


def replicated(fn: Callable[..., _Out], mesh: Mesh | None) -> Callable[..., _Out]:
    """`fn` run whole on every device of `mesh`, as one program per device.

    Inputs and outputs are replicated; `fn` is traced once inside a `shard_map`
    whose every axis is manual, so the partitioner has nothing to split: each
    device runs exactly the single-device program, and a
    `shard_population` inside it splits only the evaluation. `evolve` runs its
    chunks this way, so the strategy's reductions (in `ask`/`tell`) keep the
    single-device summation order, and with it their bits. Non-array outputs
    (functions, configuration in a module) come back as traced.

    Without a mesh this is `fn` itself.
    """
    if mesh is None:
        return fn

    def wrapped(*args: Any) -> _Out:
        dynamic, static = eqx.partition(args, eqx.is_array)
        # shard_map takes and returns arrays only: the body runs once, at trace
        # time, and hands its non-array outputs out through this list.
        out_static = []

        def body(dynamic: Any) -> Any:
            out = fn(*eqx.combine(dynamic, static))
            out_dynamic, out_static_part = eqx.partition(out, eqx.is_array)
            out_static.append(out_static_part)
            return out_dynamic

        # check_vma=False: the body is device-invariant except inside
        # shard_population, whose outputs are all-gathered, so every output is
        # the same on every device, as out_specs=P() declares.
        out_dynamic = jax.shard_map(
            body,
            mesh=mesh,
            in_specs=PartitionSpec(),
            out_specs=PartitionSpec(),
            check_vma=False,
        )(dynamic)
        return eqx.combine(out_dynamic, out_static[0])

    return wrapped


def shard_population(
    fn: Callable[[Any, Any], Any], mesh: Mesh | None
) -> Callable[[Any, Any], Any]:
    """`fn(batched, shared)` with `batched` split over the mesh, outputs gathered.

    Every array leaf of `batched` carries a leading axis (a multiple of the
    device count); each device calls `fn` on its contiguous block of it, with
    `shared` whole. The outputs, stacked along the same axis, are all-gathered,
    so the caller sees whole arrays on every device: the all-gather of fitness
    before `tell` happens here.

    Called inside `replicated` (as `evolve` does) the block is sliced out of
    the replicated operands by device index; called on its own it is a
    `shard_map`. Without a mesh this is `fn` itself.
    """
    if mesh is None:
        return fn
    axes = tuple(mesh.axis_names)

    def gathered(batched: Any, shared: Any) -> Any:
        out = fn(batched, shared)
        return jtu.tree_map(
            lambda x: jax.lax.all_gather(x, axes, axis=0, tiled=True), out
        )

    def split(batched: Any, shared: Any) -> Any:
        if _manual(mesh):
            # Inside `replicated`'s shard_map every device holds the whole
            # population: each takes its own contiguous block by device index.
            size = jtu.tree_leaves(batched)[0].shape[0]
            block = size // mesh.size
            start = jax.lax.axis_index(axes) * block
            batched = jtu.tree_map(
                lambda x: jax.lax.dynamic_slice_in_dim(x, start, block), batched
            )
            return gathered(batched, shared)
        # check_vma=False: user lifetimes start their scans from constants
        # (device invariant) and carry genome-dependent values (device varying);
        # the varying-manual-axes check would reject every such scan. The outputs
        # are all-gathered, so declaring them replicated is true.
        return jax.shard_map(
            gathered,
            mesh=mesh,
            in_specs=(_population_spec(mesh), PartitionSpec()),
            out_specs=PartitionSpec(),
            check_vma=False,
        )(batched, shared)

    return split


__all__ = [
    "POPULATION_AXIS",
    "check_divisible",
    "device_mesh",
    "initialize_distributed",
    "mesh_size",
    "population_mesh",
    "replicate",
    "replicated",
    "shard_population",
    "topology",
    "use_cpu_devices",
]
