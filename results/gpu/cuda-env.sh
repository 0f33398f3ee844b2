# Sourced by the device scripts (run3.sh on): puts the first CUDA library folder that holds
# NVRTC on LD_LIBRARY_PATH (msccl-run compiles its kernels at run time).
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64; do
  if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
done
