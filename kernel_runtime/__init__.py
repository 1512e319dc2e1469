"""kernel_runtime: executes ``flexpipe-plan/1`` plans on torch.distributed (NCCL on GPUs, gloo on CPU)."""
