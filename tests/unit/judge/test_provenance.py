"""Kernel provenance: whose code each device kernel of a profiled forward is, and when a candidate
wrote no kernel of its own."""

from harness.judge.provenance import custom_share, kernel_shares, no_custom_kernel_reason, origin_of, own_kernel_names
from harness.records import CandidateKind
from harness.worker.protocol import KernelTime, Profile

CUDA_CODE = '''
cuda_source = """
__global__ void __launch_bounds__(256) fused_bias_gelu(const float* x, float* y, int n) {}
template <typename T>
__global__ void reduce_rows(T* out) {}
"""
'''
TRITON_CODE = '''
@triton.autotune(configs=[], key=["n"])
@triton.jit
def softmax_kernel(x_ptr, n: tl.constexpr):
    pass
'''


def test_the_candidates_own_kernels_are_named_from_its_source():
    assert own_kernel_names(CUDA_CODE) == {"fused_bias_gelu", "reduce_rows"}
    assert own_kernel_names(TRITON_CODE) == {"softmax_kernel"}


def test_each_kernel_is_given_its_origin():
    own = {"fused_bias_gelu", "softmax_kernel"}
    assert origin_of("fused_bias_gelu(float const*, float*, int)", None, own) == "candidate"
    assert origin_of("softmax_kernel", None, own) == "candidate"
    assert origin_of("void at::native::vectorized_elementwise_kernel<4, ...>", "aten::add", own) == "pytorch"
    assert origin_of("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32", "aten::cudnn_convolution", own) == "cudnn"
    assert origin_of("cutlass_80_tensorop_s1688gemm_128x128", "aten::mm", own) == "cublas"
    assert origin_of("nvjet_tst_128x64_64x4", None, own) == "cublas"  # a library the extension called itself
    assert origin_of("triton_poi_fused_add_relu_0", None, own) == "torch_compile"
    assert origin_of("my_unnamed_kernel", None, set()) == "candidate"  # launched by no operator: the extension's


def test_shares_add_up_over_repeated_launches():
    profile = Profile(ops=["aten::empty"], kernels=[
        KernelTime(name="fused_bias_gelu(float const*, float*, int)", device_ms=0.3),
        KernelTime(name="fused_bias_gelu(float const*, float*, int)", device_ms=0.3),
        KernelTime(name="void at::native::vectorized_elementwise_kernel<4>", device_ms=0.4, operator="aten::add")])
    shares = kernel_shares(profile, CUDA_CODE)
    assert [(k.origin, k.share) for k in shares] == [("candidate", 0.6), ("pytorch", 0.4)]
    assert custom_share(shares) == 0.6
    assert no_custom_kernel_reason(CandidateKind.cuda, shares, profile, 1.0) is None


def test_no_custom_kernel_when_none_of_the_device_time_is_its_own():
    profile = Profile(ops=["aten::var_mean", "aten::rsqrt"], kernels=[
        KernelTime(name="void at::native::reduce_kernel<512>", device_ms=0.2, operator="aten::var_mean"),
        KernelTime(name="void at::native::vectorized_elementwise_kernel<4>", device_ms=0.1, operator="aten::rsqrt")])
    shares = kernel_shares(profile, CUDA_CODE)
    assert custom_share(shares) == 0
    assert "none of its device time" in no_custom_kernel_reason(CandidateKind.cuda, shares, profile, 1.0)


def test_no_custom_kernel_for_code_that_compiles_nothing():
    assert "compiles no kernel" in no_custom_kernel_reason(CandidateKind.python, [], None, 1.0)


def test_on_the_cpu_an_extension_that_only_calls_pytorch_operators_is_flagged():
    only_ops = Profile(ops=["aten::var_mean", "aten::rsqrt", "aten::empty"], elapsed_ms=10.0,
                       top_op_ms={"aten::var_mean": 6.0, "aten::rsqrt": 3.5, "aten::empty": 0.1})
    assert "PyTorch operators" in no_custom_kernel_reason(CandidateKind.cpp, [], only_ops, 10.0)
    own_loop = Profile(ops=["aten::empty_like"], elapsed_ms=10.0, top_op_ms={"aten::empty_like": 0.05})
    assert no_custom_kernel_reason(CandidateKind.cpp, [], own_loop, 10.0) is None
