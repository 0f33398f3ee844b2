"""NVIDIA boxes: the DGX-1 NVLink graph and the DGX A100's NVSwitch (as msccl-tools'
`msccl.topologies.nvidia`). Each names the synth topology it matches."""

from . import Topology, _matrix

_DGX1 = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
]


def dgx1():
    """The DGX-1's hybrid cube-mesh: links[dst][src] NVLinks between each pair."""
    return Topology("dgx1", [row[:] for row in _DGX1], spec="dgx1")


def dgx_a100():
    """Eight GPUs on NVSwitches: every pair linked."""
    return Topology("dgx_a100", _matrix(8, lambda s, d: True), spec="dgx-a100")


def nvlink_only(nvidia_smi_topo=None):
    """The NVLink graph of a DGX-1 (reading nvidia-smi output is not supported)."""
    if nvidia_smi_topo is not None:
        raise ValueError("nvlink_only(nvidia_smi_topo) is not supported; use "
                         "msccl.topologies.named('your.toml') or synth's nvidia-smi import")
    return dgx1()
