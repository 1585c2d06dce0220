"""Networks behind one policy protocol (`AbstractPolicy`)."""

from .backpropamine import (
    PlasticMLPPolicy as PlasticMLPPolicy,
    PlasticMLPState as PlasticMLPState,
    neuromodulated_hebb as neuromodulated_hebb,
)
from .base import AbstractPolicy as AbstractPolicy, PolicyState as PolicyState
from .batching import population_last as population_last
from .factories import sparse_lif as sparse_lif, sparse_rate as sparse_rate
from .fused import PallasLayout as PallasLayout
from .gru import GRUPolicy as GRUPolicy, GRUState as GRUState
from .layouts import make_layout as make_layout
from .mlp import MLPPolicy as MLPPolicy
from .neurons import (
    LIFNeurons as LIFNeurons,
    RateNeurons as RateNeurons,
    lif_step as lif_step,
    rate_step as rate_step,
)
from .per_synapse import PerSynapseHebbianRule as PerSynapseHebbianRule
from .plasticity import (
    TRACE_DTYPES as TRACE_DTYPES,
    HebbianRule as HebbianRule,
    PlasticState as PlasticState,
    STDPRule as STDPRule,
    stochastic_round as stochastic_round,
    three_factor_update as three_factor_update,
    update_trace as update_trace,
)
from .propagate import (
    LAYOUTS as LAYOUTS,
    AbstractLayout as AbstractLayout,
    DenseLayout as DenseLayout,
    GatherLayout as GatherLayout,
    SegmentLayout as SegmentLayout,
    choose_layout as choose_layout,
    propagate as propagate,
)
from .recurrent import (
    RecurrentPolicy as RecurrentPolicy,
    RecurrentState as RecurrentState,
)
from .sparse import (
    SparseRatePolicy as SparseRatePolicy,
    SparseRateState as SparseRateState,
    SparseSpikingPolicy as SparseSpikingPolicy,
    SparseSpikingState as SparseSpikingState,
)
from .sparse_backpropamine import (
    BackpropamineRule as BackpropamineRule,
    BackpropamineState as BackpropamineState,
)
from .topology import Topology as Topology
