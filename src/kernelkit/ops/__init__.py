"""Built-in ops: one module per op, each in the same order (reference, kernels, launchers, impls)."""

BUILTIN_OPS: dict[str, str] = {
    "square": "kernelkit.ops.square",
    "gelu": "kernelkit.ops.gelu",
    "gelu_backward": "kernelkit.ops.gelu",
    "gelu_erf": "kernelkit.ops.gelu",
    "gelu_erf_backward": "kernelkit.ops.gelu",
    "softmax": "kernelkit.ops.softmax",
    "softmax_backward": "kernelkit.ops.softmax",
    "bias_gelu": "kernelkit.ops.bias_gelu",
    "matmul": "kernelkit.ops.matmul",
    "matmul_bt": "kernelkit.ops.matmul",
    "matmul_tf32": "kernelkit.ops.matmul",
    "matmul_fp8": "kernelkit.ops.matmul",
    "sparsify24": "kernelkit.ops.sparse24",
    "sparsify24_transposable": "kernelkit.ops.sparse24",
    "linear24": "kernelkit.ops.sparse24",
}
