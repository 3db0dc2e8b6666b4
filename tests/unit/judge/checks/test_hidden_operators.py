"""Operators hidden from the profiler, read in the source: recording switched off, calls past the
dispatcher or below the recorded call, libraries called directly."""

from harness.judge.checks.hidden_operators import hidden_operator_evidence
from harness.worker.protocol import Profile


def test_source_that_hides_operators_from_the_profiler_counts_as_falling_back():
    """The fallback rules read a profile; C++ that switches its recording off, or calls a kernel
    past the dispatcher that records, would pass as its own code."""
    relu = Profile(ops=["aten::relu", "aten::clamp_min"], top_op_ms={"aten::relu": 0.01})
    guarded = "{ at::RecordFunctionGuard guard(false); y = at::addmm(b, x, w.t()); }"
    assert hidden_operator_evidence(guarded, relu) == [
        "switches PyTorch's operator recording off (RecordFunctionGuard): the profiler cannot see what it runs"]
    assert hidden_operator_evidence("y = at::cpu::addmm(b, x, w);", relu) == [
        "calls at::cpu::…addmm past the dispatcher, unseen by the profiler (library matrix multiply)"]
    assert "which the reference runs" in hidden_operator_evidence("at::native::relu(x)", relu)[0]
    for hidden in ("at::cuda::blas::gemm<float>(a, b)", "at::native::cpublas::gemm(a, b)",
                   "at::redispatch::addmm(ks, b, x, w)", "at::_ops::mm::redispatch(ks, a, b)",
                   "handle.typed<Tensor(const Tensor&)>().redispatch(ks, x)",
                   "torch.ops.aten.mm.default.redispatch(ks, a, b)", "using namespace at::native;\naddmm(b, x, w);",
                   "namespace K = at::cpu;\nK::addmm(b, x, w);", "namespace K = ::at::native; K::relu(x);",
                   "#define GLUE(a, b) a##b\nat::GLUE(RecordFunction, Guard) g(false);",
                   'extern "C" void sgemm_(...);\nsgemm_(&t, &n, &m);', "cblas_sgemm(CblasRowMajor, a, b)",
                   "cublasSgemm(handle, op, op, m, n, k)", "cublasGemmEx(h, a, b)", "cublasLtMatmul(h, d, a)",
                   "cudnnConvolutionForward(h, a, x)", "dnnl::matmul prim(desc);"):
        assert hidden_operator_evidence(hidden, relu), hidden
    honest = """
    #include <ATen/record_function.h>
    RECORD_FUNCTION("my_relu", std::vector<c10::IValue>({x}));   // adds a scope: no RecordFunctionGuard needed
    auto out = at::empty_like(x); auto stream = at::cuda::getCurrentCUDAStream();
    at::native::resize_output(out, x.sizes()); auto y = at::_ops::mm::call(a, b);  // recorded
    /* adapted from at::native::softmax_lastdim_kernel */
    namespace at { namespace native { Tensor my_layer_norm_forward(const Tensor& x); } }
    auto z = at::native::my_layer_norm_forward(x);  // its own function, in ATen's namespace
    # a Python comment: at::native::addmm
    #define CHECK_INPUT(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
    cublasHandle_t handle; cublasCreate(&handle); cublasSetStream(handle, stream); cudnnCreate(&h);
    float sgemm_tile[16]; int dgemm_count = 0;  // names that only contain a library's
    """
    assert hidden_operator_evidence(honest, relu) == []


def test_switching_recording_off_from_python_or_redispatching_by_name_counts_as_falling_back():
    relu = Profile(ops=["aten::relu", "aten::clamp_min"], top_op_ms={"aten::relu": 0.01})
    for hidden in ("torch._C._autograd._enable_record_function(False)", "torch._C._autograd._clear_callbacks()",
                   "from torch.autograd.profiler import _disable_profiler", 'getattr(op, "redispatch")(keys, x)'):
        assert hidden_operator_evidence(hidden, relu), hidden
    assert hidden_operator_evidence("with torch.autograd.profiler.record_function('mine'): y = my_ext.relu(x)",
                                    relu) == []
