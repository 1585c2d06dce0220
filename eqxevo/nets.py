"""Networks behind one policy protocol (`AbstractPolicy`): policies, their
topologies and propagation layouts, neurons and plasticity rules (docs/networks.md).
"""

from ._src.nets.backpropamine import (
    PlasticMLPPolicy as PlasticMLPPolicy,
)
from ._src.nets.base import (
    AbstractPolicy as AbstractPolicy,
    PolicyState as PolicyState,
)
from ._src.nets.factories import (
    sparse_lif as sparse_lif,
    sparse_rate as sparse_rate,
)
from ._src.nets.fused import (
    PallasLayout as PallasLayout,
)
from ._src.nets.gru import (
    GRUPolicy as GRUPolicy,
)
from ._src.nets.mlp import (
    MLPPolicy as MLPPolicy,
)
from ._src.nets.neurons import (
    LIFNeurons as LIFNeurons,
    RateNeurons as RateNeurons,
)
from ._src.nets.per_synapse import (
    PerSynapseHebbianRule as PerSynapseHebbianRule,
)
from ._src.nets.plasticity import (
    HebbianRule as HebbianRule,
    PlasticState as PlasticState,
    STDPRule as STDPRule,
)
from ._src.nets.propagate import (
    AbstractLayout as AbstractLayout,
    DenseLayout as DenseLayout,
    GatherLayout as GatherLayout,
    SegmentLayout as SegmentLayout,
    choose_layout as choose_layout,
)
from ._src.nets.recurrent import (
    RecurrentPolicy as RecurrentPolicy,
)
from ._src.nets.sparse import (
    SparseRatePolicy as SparseRatePolicy,
    SparseSpikingPolicy as SparseSpikingPolicy,
)
from ._src.nets.sparse_backpropamine import (
    BackpropamineRule as BackpropamineRule,
    BackpropamineState as BackpropamineState,
)
from ._src.nets.topology import (
    Topology as Topology,
)
