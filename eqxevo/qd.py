"""Quality-diversity: MAP-Elites archives of elites over a descriptor space, the
emitters that fill them, and `MapElites`, which `eqxevo.evolve` runs like a
`Strategy` (docs/qd.md).
"""

from ._app.figures import (
    archive_figure as archive_figure,
)
from ._src.qd.archive import (
    Archive as Archive,
)
from ._src.qd.emitters import (
    ESEmitter as ESEmitter,
    IsoLineEmitter as IsoLineEmitter,
)
from ._src.qd.map_elites import (
    MapElites as MapElites,
)
