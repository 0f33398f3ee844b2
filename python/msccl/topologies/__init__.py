"""Topologies: which rank pairs may exchange data. Each carries the name of the synth
topology it matches (`spec`), so synth can check links and simulate the program on it."""


class Topology:
    """`links[dst][src]` is the number of links from src to dst (MSCCLang's convention)."""

    def __init__(self, name, links, switches=None, spec=None):
        self.name = name
        self.links = links
        self.switches = switches or []
        self.spec = spec

    def num_nodes(self):
        return len(self.links)

    def _describe(self):
        n = len(self.links)
        pairs = [[src, dst] for dst in range(n) for src in range(n)
                 if src != dst and self.links[dst][src]]
        return {"name": self.name, "ranks": n, "spec": self.spec, "links": pairs}


class _Named(Topology):
    """A synth topology by name; synth resolves its links."""

    def __init__(self, spec, ranks):
        self.name = spec
        self.spec = spec
        self.ranks = ranks
        self.switches = []
        self.links = [[0] * ranks for _ in range(ranks)]

    def _describe(self):
        return {"name": self.name, "ranks": self.ranks, "spec": self.spec, "links": None}


def _matrix(n, linked):
    return [[1 if src != dst and linked(src, dst) else 0 for src in range(n)] for dst in range(n)]


def fully_connected(num_nodes):
    return Topology(f"fully_connected({num_nodes})", _matrix(num_nodes, lambda s, d: True),
                    spec=f"fully-connected:{num_nodes}")


def ring(num_nodes):
    n = num_nodes
    return Topology(f"ring({n})", _matrix(n, lambda s, d: (s - d) % n in (1, n - 1)),
                    spec=f"ring:{n}")


def line(num_nodes):
    return Topology(f"line({num_nodes})", _matrix(num_nodes, lambda s, d: abs(s - d) == 1),
                    spec=f"line:{num_nodes}")


def star(num_nodes, non_blocking=True):
    return Topology(f"star({num_nodes})", _matrix(num_nodes, lambda s, d: s == 0 or d == 0),
                    spec=f"star:{num_nodes}")


def dgx1():
    """The DGX-1 NVLink graph (also in `msccl.topologies.nvidia`)."""
    from .nvidia import dgx1 as _dgx1
    return _dgx1()


def nvlink_only(nvidia_smi_topo=None):
    """The NVLink graph of a DGX-1 (also in `msccl.topologies.nvidia`)."""
    from .nvidia import nvlink_only as _nvlink_only
    return _nvlink_only(nvidia_smi_topo)


def named(spec, ranks=None):
    """Any synth topology by name or file: `named('dgx-a100')`, `named('dgx-a100x2', 16)`.
    `ranks` is only used by `num_nodes()` inside Python; synth checks it."""
    return _Named(spec, ranks or 0)
