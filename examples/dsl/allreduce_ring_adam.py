# Ring allreduce on a ring of N GPUs with an optimizer step fused between its halves (synth's
# `.compute`, an extension of MSCCLang): each chunk is reduced around the ring into its
# owner's output, the owner applies Adam (or another epilogue) to it alone, and the ring
# gathers the updated parameters. Then `synth run DIR/allreduce_ring_adam.json --size 1M`.
# Run: synth compile examples/dsl/allreduce_ring_adam.py --out DIR -- 4
import argparse

from msccl.language import *
from msccl.language.collectives import AllReduce
from msccl.topologies import ring

parser = argparse.ArgumentParser()
parser.add_argument("num_gpus", type=int, help="ranks in the ring")
parser.add_argument("--epilogue", default="adam",
                    help="adam, sgd, bias-dropout-residual or statements ending in `out = ...`")
parser.add_argument("--lr", type=float, default=1e-3, help="learning rate (adam, sgd)")
args = parser.parse_args()

n = args.num_gpus
scalars = {"lr": args.lr} if args.epilogue in ("adam", "sgd") else {}
with MSCCLProgram("allreduce_ring_adam", ring(n), AllReduce(n, n, False), 1):
    for i in range(n):
        # The owner starts from its own input; the others' partial sum arrives around the ring.
        chunk(i, Buffer.input, i).copy(i, Buffer.output, i)
        partial = chunk((i + 1) % n, Buffer.input, i)
        for hop in range(2, n):
            partial = chunk((i + hop) % n, Buffer.input, i).reduce(partial)
        total = chunk(i, Buffer.output, i).reduce(partial)
        # The epilogue on the owner's slice only, after its last reduce.
        total.compute(args.epilogue, **scalars)
        for hop in range(1, n):
            total = total.copy((i + hop) % n, Buffer.output, i)
    Check()
