"""Built-in ops: one package per op (or family of ops), each laid out the same way: ``__init__.py`` holds the
reference, sizes, cost model and impl registrations; ``triton.py`` and ``numba.py`` the kernels, imported lazily
(``kernelkit.backends.lazy.kernel_module``); ``cuda.cu`` the CUDA C++ kernels. BUILTIN_OPS: op name -> package."""

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
    "attention": "kernelkit.ops.attention",
    "attention_causal": "kernelkit.ops.attention",
    "attention_gqa": "kernelkit.ops.attention",
    "attention_with_lse": "kernelkit.ops.attention",
    "attention_causal_with_lse": "kernelkit.ops.attention",
    "attention_gqa_with_lse": "kernelkit.ops.attention",
    "attention_backward": "kernelkit.ops.attention",
    "attention_causal_backward": "kernelkit.ops.attention",
    "attention_gqa_backward": "kernelkit.ops.attention",
    "linear_w4": "kernelkit.ops.lowbit",
    "linear_w8": "kernelkit.ops.lowbit",
    "linear_w2": "kernelkit.ops.lowbit",
}
