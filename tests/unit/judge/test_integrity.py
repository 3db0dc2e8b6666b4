"""The integrity rules the parent applies: computing with PyTorch's own kernels, behaving
differently when profiled, and changing the inputs."""

import pytest
import torch

from harness.judge.integrity import (FALLBACK_SHARE, family_of, fallback_evidence, hidden_library_evidence,
                                     hidden_operator_evidence, library_to_tell_ms, mutated_inputs, op_name,
                                     outputs_shared, profiled_too_slow, untold_library)
from harness.judge.timer import Timed
from harness.worker.protocol import KernelTime, Profile, TensorRef
from harness.worker.sampling import CpuSamples

CONV_REFERENCE = Profile(ops=["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::empty"],
                         kernels=[KernelTime(name="implicit_convolve_sgemm", device_ms=1.0, operator="aten::conv2d"),
                                  KernelTime(name="fill_kernel", device_ms=0.01, operator="aten::zeros")])


def test_own_kernels_are_no_fallback():
    honest = Profile(ops=["aten::empty", "aten::contiguous"],
                     kernels=[KernelTime(name="my_conv_kernel", device_ms=2.0),
                              KernelTime(name="fill_kernel", device_ms=0.01, operator="aten::zero_")])
    assert fallback_evidence(CONV_REFERENCE, honest) == []


def test_the_reference_library_family_is_a_fallback_with_kernel_evidence():
    library = Profile(ops=["aten::cudnn_convolution"],
                      kernels=[KernelTime(name="implicit_convolve_sgemm", device_ms=1.0, operator="aten::cudnn_convolution")])
    evidence = fallback_evidence(CONV_REFERENCE, library)
    assert "a library convolution like the reference's" in evidence[0]
    assert any("implicit_convolve_sgemm" in e for e in evidence)


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


def test_library_operators_are_known_by_family_under_any_of_their_names():
    """A red team's disguises (2026-12-04): the reference's matmul as tensordot, addbmm or inner,
    its MSE as mse_loss or dist, its smooth L1 loss as huber_loss, a softmax's logsumexp; then a
    matmul as an embedding_bag with per-sample weights."""
    families = {"tensordot": "matrix multiply", "addbmm": "matrix multiply", "inner": "matrix multiply",
                "bilinear": "matrix multiply", "int_mm": "matrix multiply", "mse_loss": "loss", "huber_loss": "loss",
                "smooth_l1_loss": "loss", "nll_loss2d": "loss", "binary_cross_entropy_with_logits": "loss",
                "dist": "loss", "cdist": "loss", "logsumexp": "softmax", "log_softmax": "softmax",
                "upsample_bilinear2d": "interpolation", "cudnn_convolution": "convolution",
                "conv_transpose2d": "convolution", "native_layer_norm": "normalization",
                "max_pool2d_with_indices": "pooling", "lstm": "recurrent", "embedding_bag": "matrix multiply",
                "im2col": "convolution", "mkldnn_rnn_layer": "recurrent", "cudnn_rnn": "recurrent",
                "thnn_fused_lstm_cell": "recurrent", "rnn_tanh": "recurrent", "fft_r2c": "fourier",
                "fft_rfft2": "fourier", "stft": "fourier", "weight_norm_interface": "normalization"}
    assert {name: family_of(name) for name in families} == families
    for elementwise_or_reduction in ("relu", "add", "mul", "sum", "mean", "div", "amax", "exp", "gelu", "where",
                                     "cumsum", "argmax", "gather", "linalg_vector_norm", "embedding",
                                     "index_select", "sort"):
        assert family_of(elementwise_or_reduction) is None, elementwise_or_reduction


def test_switching_recording_off_from_python_or_redispatching_by_name_counts_as_falling_back():
    relu = Profile(ops=["aten::relu", "aten::clamp_min"], top_op_ms={"aten::relu": 0.01})
    for hidden in ("torch._C._autograd._enable_record_function(False)", "torch._C._autograd._clear_callbacks()",
                   "from torch.autograd.profiler import _disable_profiler", 'getattr(op, "redispatch")(keys, x)'):
        assert hidden_operator_evidence(hidden, relu), hidden
    assert hidden_operator_evidence("with torch.autograd.profiler.record_function('mine'): y = my_ext.relu(x)",
                                    relu) == []


def test_no_code_of_its_own_and_operators_that_read_next_to_no_data_is_hidden_compute():
    """A relu redispatched below the profiler's recording, through a name no source check reads:
    alone, or beside decoys (a multiply of two elements; a view naming the whole input is glue).
    An honest candidate that computes only the slice the reference keeps reads what it returns;
    one that works in pieces reads as much in all, one that computes with copies alone reads the
    data through them."""
    relu = Profile(ops=["aten::relu", "aten::clamp_min"], top_op_ms={"aten::relu": 0.04}, elements_read={"aten::relu": 4096})
    nothing_seen = Profile(ops=["aten::empty_like"], top_op_ms={"aten::empty_like": 0.001}, elapsed_ms=0.1)
    evidence = fallback_evidence(relu, nothing_seen, 0.05, 0.045, own_code=False, output_elements=4096)
    assert evidence and "no operator the profiler recorded computes or copies" in evidence[-1]
    assert fallback_evidence(relu, nothing_seen, 1.0, 0.045, own_code=False) == []  # interpreter-slow: Python of its own
    assert fallback_evidence(relu, nothing_seen, 0.15, 0.045, own_code=False)  # 0.3x: no interpreter's speed
    assert fallback_evidence(relu, nothing_seen, 0.05, 0.045, own_code=True) == []  # an extension's own work
    assert fallback_evidence(relu, nothing_seen, 0.05, 0.045, own_code=False, degenerate=True) == []  # zeros pass
    decoys = Profile(ops=["aten::mul", "aten::diagonal"], top_op_ms={"aten::mul": 0.002, "aten::diagonal": 0.001},
                     elements_read={"aten::mul": 2, "aten::diagonal": 4096}, elapsed_ms=0.1)
    evidence = fallback_evidence(relu, decoys, 0.05, 0.045, own_code=False, output_elements=4096)
    assert "compute or copy read 2 elements of data where the reference's read 4096 and its outputs have 4096" in evidence[-1]
    kept_slice = Profile(ops=["aten::clamp", "aten::slice"], top_op_ms={"aten::clamp": 0.003, "aten::slice": 0.001},
                         elements_read={"aten::clamp": 256, "aten::slice": 4096}, elapsed_ms=0.01)
    assert fallback_evidence(relu, kept_slice, 0.01, 0.045, own_code=False, output_elements=256) == []
    pieces = Profile(ops=["aten::clamp"], top_op_ms={"aten::clamp": 0.04}, elements_read={"aten::clamp": 4096}, elapsed_ms=0.1)
    assert fallback_evidence(relu, pieces, 0.05, 0.045, own_code=False, output_elements=4096) == []
    unknown = relu.model_copy(update={"elements_read": {}})  # its operators took a list of tensors
    assert fallback_evidence(unknown, decoys, 0.05, 0.045, own_code=False, output_elements=4096) == []
    elementwise = Profile(ops=["aten::mul", "aten::gt"], top_op_ms={"aten::mul": 0.02, "aten::gt": 0.02}, elapsed_ms=0.1)
    assert fallback_evidence(unknown, elementwise, 0.05, 0.045, own_code=False) == []  # re-spelled: no fallback
    copies = Profile(ops=["aten::empty_like", "aten::slice", "aten::copy_"], elapsed_ms=0.1,
                     top_op_ms={"aten::empty_like": 0.001, "aten::slice": 0.001, "aten::copy_": 0.03},
                     elements_read={"aten::empty_like": 4096, "aten::slice": 8192, "aten::copy_": 4096})
    assert fallback_evidence(relu, copies, 0.05, 0.045, own_code=False, output_elements=4096) == []  # a roll as copies
    assert fallback_evidence(unknown, copies, 0.05, 0.045, own_code=False, output_elements=4096) == []


def test_the_references_operators_on_next_to_none_of_its_data_are_not_its_work():
    """An honest C++ MSE that leaves the mean of its 64 row sums to PyTorch, on a 0.02 ms problem
    where that mean was 71% to 78% of the call, or divides its sum by the count (68%); the same operators over chunks that add up to the
    data are the reference's work; where the reference's reads are not known, time alone decides."""
    mse = Profile(ops=["aten::sub", "aten::pow", "aten::mean"], elapsed_ms=0.02,
                  top_op_ms={"aten::sub": 0.004, "aten::pow": 0.004, "aten::mean": 0.008},
                  elements_read={"aten::sub": 32768, "aten::pow": 32768, "aten::mean": 32768})
    row_mean = Profile(ops=["aten::mean", "aten::sum"], top_op_ms={"aten::mean": 0.013}, elements_read={"aten::mean": 64},
                       elapsed_ms=0.018)
    assert fallback_evidence(mse, row_mean, 0.017, 0.02) == []
    chunks = row_mean.model_copy(update={"elements_read": {"aten::mean": 32768}})
    assert "calls aten::mean, which the reference runs" in fallback_evidence(mse, chunks, 0.017, 0.02)
    unknown = mse.model_copy(update={"elements_read": {"aten::sub": 32768, "aten::pow": 32768}})
    assert fallback_evidence(unknown, row_mean, 0.017, 0.02)
    divides = Profile(ops=["aten::div"], top_op_ms={"aten::div": 0.012}, elements_read={"aten::div": 1}, elapsed_ms=0.02)
    assert fallback_evidence(mse.model_copy(update={"ops": mse.ops + ["aten::div"]}), divides, 0.018, 0.02) == []
    assert fallback_evidence(mse.model_copy(update={"ops": mse.ops + ["aten::div"]}),
                             divides.model_copy(update={"elements_read": {"aten::div": 32768}}), 0.018, 0.02)


def test_library_compute_of_another_family_counts_when_it_takes_most_of_the_time():
    matmul_reference = Profile(ops=["aten::linear", "aten::addmm"])
    as_conv = Profile(ops=["aten::conv2d"], top_op_ms={"aten::conv2d": 0.8, "aten::slice": 0.05}, elapsed_ms=1.0)
    assert "library convolution" in fallback_evidence(matmul_reference, as_conv)[0]
    mostly_own = Profile(ops=["aten::conv2d"], top_op_ms={"aten::conv2d": 0.2}, elapsed_ms=1.0)
    assert fallback_evidence(matmul_reference, mostly_own) == []  # a cheap library step beside its own work


def test_a_cheap_step_of_the_reference_is_allowed_but_doing_its_work_is_not():
    relu_reference = Profile(ops=["aten::relu", "aten::clamp_min"])
    share = FALLBACK_SHARE
    mostly_relu = Profile(ops=["aten::relu"], top_op_ms={"aten::relu": (share + 0.2) * 2.0}, elapsed_ms=2.0)
    assert "which the reference runs" in fallback_evidence(relu_reference, mostly_relu)[0]
    a_little_relu = Profile(ops=["aten::relu"], top_op_ms={"aten::relu": 0.1}, elapsed_ms=2.0)
    assert fallback_evidence(relu_reference, a_little_relu) == []


def test_on_a_problem_of_microseconds_the_share_is_against_the_references_own():
    """The interpreter takes a fifth of the reference's 0.05 ms call: a library matmul that takes
    45% of the candidate's call is most of the work there is."""
    reference = Profile(ops=["aten::linear", "aten::addmm"], top_op_ms={"aten::linear": 0.04}, elapsed_ms=0.08)
    candidate = Profile(ops=["aten::matmul", "aten::mm", "aten::add"], top_op_ms={"aten::matmul": 0.0285, "aten::add": 0.008},
                        elapsed_ms=0.11)
    all_operators = Profile(ops=["aten::linear", "aten::addmm"], top_op_ms={"aten::linear": 0.05}, elapsed_ms=0.08)
    assert fallback_evidence(all_operators, candidate, 0.0634, 0.05) == []  # below half of the time
    assert "a library matrix multiply" in fallback_evidence(reference, candidate, 0.0634, 0.05)[0]
    with_views = Profile(ops=["aten::t", "aten::matmul", "aten::add"],
                         top_op_ms={"aten::t": 0.0145, "aten::matmul": 0.028, "aten::add": 0.01}, elapsed_ms=0.125)
    assert fallback_evidence(all_operators, with_views, 0.058, 0.05)  # a transpose is no work of its own
    own_kernel = Profile(ops=["aten::empty", "aten::add"], top_op_ms={"aten::empty": 0.002, "aten::add": 0.008}, elapsed_ms=0.1)
    assert fallback_evidence(reference, own_kernel, 0.0634, 0.05) == []


def test_without_code_of_its_own_the_time_outside_operators_counts_only_beyond_the_references_call():
    """No extension, no Triton: up to the reference's whole call, time outside its operators is
    the interpreter's and the harness's, so a matmul under another name is most of the work
    however the interpreter stretches the call; Python of its own beyond that is its own work,
    even beside operators the reference also runs."""
    reference = Profile(ops=["aten::linear", "aten::addmm"], top_op_ms={"aten::linear": 0.036}, elapsed_ms=0.65)
    renamed = Profile(ops=["aten::t", "aten::matmul", "aten::add"],
                      top_op_ms={"aten::t": 0.0097, "aten::matmul": 0.0177, "aten::add": 0.0065}, elapsed_ms=0.65)
    assert fallback_evidence(reference, renamed, 0.065, 0.05) == []  # against the whole call: too little
    evidence = fallback_evidence(reference, renamed, 0.065, 0.05, own_code=False)
    assert "calls aten::matmul, a library matrix multiply like the reference's" in evidence
    mse_reference = Profile(ops=["aten::sub", "aten::pow", "aten::mean", "aten::sum", "aten::div"])
    respelled = Profile(ops=["aten::sub", "aten::mul", "aten::sum", "aten::div"],
                        top_op_ms={"aten::sub": 0.01, "aten::mul": 0.01, "aten::sum": 0.008, "aten::div": 0.004}, elapsed_ms=3.0)
    assert fallback_evidence(mse_reference, respelled, 0.09, 0.08, own_code=False)  # the reference, re-spelled
    assert fallback_evidence(mse_reference, respelled, 2.6, 0.08, own_code=False) == []  # 2.5 ms of its own Python
    only_glue = Profile(ops=["aten::empty_like", "aten::copy_"], top_op_ms={"aten::copy_": 0.01}, elapsed_ms=1.0)
    assert fallback_evidence(reference, only_glue, 2.0, 0.05, own_code=False) == []


def test_without_code_of_its_own_nothing_but_the_references_operators_is_a_fallback_however_long_it_waits():
    """A relu handed to a thread pool: the call waits far longer than the relu takes, and that
    wait is no computation of its own. With an extension the same wait would count."""
    relu_reference = Profile(ops=["aten::relu", "aten::clamp_min"], top_op_ms={"aten::relu": 0.01}, elapsed_ms=0.1)
    pooled = Profile(ops=["aten::relu", "aten::clamp_min", "aten::empty_like"],
                     top_op_ms={"aten::relu": 0.05, "aten::empty_like": 0.01}, elapsed_ms=0.8)
    evidence = fallback_evidence(relu_reference, pooled, 0.3, 0.02, own_code=False)
    assert "calls aten::relu, which the reference runs" in evidence
    assert "100% of its operators' time is in the reference's own operators or their library equivalents" in evidence
    assert fallback_evidence(relu_reference, pooled, 0.3, 0.02) == []  # its own kernel's time is outside operators
    beside_its_own = Profile(ops=["aten::relu", "aten::mul"], top_op_ms={"aten::relu": 0.05, "aten::mul": 0.01},
                             elapsed_ms=3.0)
    assert fallback_evidence(relu_reference, beside_its_own, 2.6, 0.02, own_code=False) == []  # Python of its own


def test_glue_operators_are_named_as_profiles_name_them():
    """aten::copy_ and aten::fill_ are glue: their in-place suffix must not hide them."""
    relu_reference = Profile(ops=["aten::relu", "aten::copy_", "aten::fill_"])
    glue = Profile(ops=["aten::copy_", "aten::fill_", "aten::zero_"],
                   top_op_ms={"aten::copy_": 0.9, "aten::fill_": 0.05}, elapsed_ms=1.0)
    assert op_name("aten::copy_") == "copy" and fallback_evidence(relu_reference, glue) == []


def test_slower_when_profiled_than_the_profiler_explains():
    reference = Timed(wall_ms=[1.0] * 5, profiled_wall_ms=[1.3])
    two_ops = [Profile(ops=["aten::empty", "aten::add"])]
    calm = Timed(wall_ms=[1.0] * 9, profiled_wall_ms=[1.6], profiles=two_ops)
    assert profiled_too_slow(calm, reference, 3, "cuda") is None  # the profiler's own cost
    watched = Timed(wall_ms=[1.0] * 9, profiled_wall_ms=[9.0, 11.0], profiles=two_ops)
    assert "profiled calls took at least 9" in profiled_too_slow(watched, reference, 3, "cuda")


def test_the_profilers_cost_grows_with_the_operators_recorded():
    """Measured on the 2-core CPU: a 0.07 ms linear as a broadcast multiply-sum took 4.3 ms when
    profiled; the reference's 8 operators had cost it 1.7 ms."""
    reference = Timed(wall_ms=[0.69] * 5, profiled_wall_ms=[2.4])
    many_ops = [Profile(ops=[f"aten::op{i}" for i in range(6)])]
    honest = Timed(wall_ms=[0.7] * 9, profiled_wall_ms=[4.3, 4.6], profiles=many_ops)
    assert profiled_too_slow(honest, reference, 8, "cpu") is None
    assert profiled_too_slow(Timed(wall_ms=[0.7] * 9, profiled_wall_ms=[40.0], profiles=many_ops),
                             reference, 8, "cpu")


def test_operators_named_by_the_thousand_buy_no_more_room_than_a_composed_candidate_needs():
    """The list of operators is the worker's to write: ten thousand names must not excuse a
    profiled call 200 times slower than the others."""
    reference = Timed(wall_ms=[0.69] * 5, profiled_wall_ms=[2.4])
    padded = [Profile(ops=[f"aten::op{i}" for i in range(10_000)])]
    assert profiled_too_slow(Timed(wall_ms=[0.7] * 9, profiled_wall_ms=[150.0], profiles=padded),
                             reference, 8, "cpu")
    dozen = [Profile(ops=[f"aten::op{i}" for i in range(12)])]
    assert profiled_too_slow(Timed(wall_ms=[0.7] * 9, profiled_wall_ms=[6.0], profiles=dozen), reference, 8, "cpu") is None


def test_a_launch_bound_honest_candidate_is_not_convicted_for_the_profilers_cost_per_call():
    """Measured on an H100 (2026-11-26): 256 calls of 8 operators took 4.6 ms, and 16.1 ms
    profiled: 34 to 75 us a call beside a fixed 1.6 ms, which a relu reference paid for its one
    operator. Room per operator named, at the reference's whole cost, covers those calls; room
    for the fixed cost plus a floor per name would not (11.8 ms)."""
    relu = Timed(wall_ms=[0.25] * 5, profiled_wall_ms=[1.85])
    eight = [Profile(ops=[f"aten::op{i}" for i in range(8)])]
    launch_bound = Timed(wall_ms=[4.57] * 9, profiled_wall_ms=[16.07], profiles=eight)
    assert profiled_too_slow(launch_bound, relu, 1, "cuda") is None


def test_input_mutation_is_exact_and_nan_safe():
    a = torch.arange(6.0)
    assert mutated_inputs([a, a], [a.clone(), a + 1e-3 * (a == 5)]) == [1]
    assert mutated_inputs([a], [a.clone()]) == []
    with_nan = torch.tensor([1.0, float("nan")])
    assert mutated_inputs([with_nan], [with_nan.clone()]) == []  # a NaN that stayed a NaN is no change


def test_fingerprints_tell_equal_outputs_from_different_ones_across_chunks(monkeypatch):
    import harness.judge.compare as compare
    import harness.judge.integrity as integrity

    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", {"cpu": 10, "cuda": 10})
    a = torch.randn(7, 9)
    b = a.clone()
    b[6, 8] += 1.0  # in the last chunk
    assert integrity.fingerprint([a]) == integrity.fingerprint([a.clone()])
    assert integrity.fingerprint([a]) != integrity.fingerprint([b])
    assert integrity.fingerprint([a]) != integrity.fingerprint([a.reshape(9, 7)])


def output(elements: int, storage_offset: int = 0, address: int | None = None, handle: str | None = None,
           offset: int = 0) -> TensorRef:
    return TensorRef(dtype="float32", shape=[elements], stride=[1], storage_offset=storage_offset,
                     device="cpu" if handle is None else "cuda", address=address, ipc_handle=handle, offset=offset)


def test_calls_of_one_command_that_return_the_same_memory_are_told_apart_from_calls_with_their_own():
    """A buffer the candidate keeps and returns every call: the later call overwrote the earlier
    one's answer. Slices of one buffer, a slice a call, are their own memory; so are one call's
    outputs that overlap each other."""
    assert outputs_shared([[output(16, address=4096)], [output(16, address=4096)]])
    assert outputs_shared([[output(16, address=4096)], [output(8, address=4096 + 32)]])  # inside the first
    assert not outputs_shared([[output(16, address=4096)], [output(16, address=4096 + 64)]])
    assert not outputs_shared([[output(16, address=4096), output(16, address=4096)]])  # one call's two views
    handle, other = "a" * 128, "b" * 128
    assert outputs_shared([[output(16, handle=handle)], [output(16, handle=handle)]])
    assert not outputs_shared([[output(16, handle=handle)], [output(16, handle=other)]])
    # A slice per call of one allocation: where each view's first element is, not its storage's start.
    assert not outputs_shared([[output(16, storage_offset=0, handle=handle)], [output(16, storage_offset=16, handle=handle)]])
    assert not outputs_shared([[output(16, handle=handle, offset=0)], [output(16, handle=handle, offset=64)]])
    assert not outputs_shared([[output(16)], [output(16)]])  # stacked in the commit buffer: nothing to tell
    assert not outputs_shared([[output(0, address=4096)], [output(0, address=4096)]])  # no elements


def sampled(library: int, calls: int, samples: int = 10_000, cores: int = 2) -> CpuSamples:
    return CpuSamples(period_ms=0.05, samples=samples, library=library, calls=calls, cores=cores)


def test_library_time_no_recorded_operator_explains_is_the_reference_hidden_from_the_profiler():
    """Sampled from outside: an extension that computes nothing beside a softmax redispatched
    below the profiler spent 123% of the reference's library time a call there (0.37 against
    0.30 ms), an honest C++ softmax 11% (its allocation and dispatch)."""
    reference = sampled(library=1344, calls=224)
    hidden = hidden_library_evidence(sampled(library=472, calls=64), [Profile(ops=[]), Profile(ops=[])], reference)
    assert len(hidden) == 1 and "no recorded operator explains" in hidden[0] and "123%" in hidden[0]
    honest = sampled(library=35, calls=54)
    assert hidden_library_evidence(honest, [Profile(ops=["aten::empty_like"], top_op_ms={"aten::empty_like": 0.01})],
                                   reference) == []


def test_library_time_its_recorded_operators_explain_is_left_to_the_fallback_rules():
    """A candidate that computes with operators the profiler sees is judged by its share of the
    time (fallback_evidence), not as hidden work: their time counts on every core it may use (an
    honest softmax of five PyTorch operators, 0.31 ms of library time a call beyond their time
    scaled by the reference's own use of threads, 1.2, had been taken for hidden work)."""
    reference = sampled(library=1344, calls=224)
    composed = [Profile(ops=["aten::exp", "aten::sum"], top_op_ms={"aten::exp": 0.08, "aten::sum": 0.02})]
    assert hidden_library_evidence(sampled(library=472, calls=64, cores=2), composed, reference) == []
    assert hidden_library_evidence(sampled(library=472, calls=64, cores=1), composed, reference) != []
    # Three recorded passes where the reference makes one: 18% of its library time unexplained
    # (noise between the profiled and the sampled calls) is 55% of the reference's, and no hiding.
    relu = sampled(library=400, calls=100)  # 0.2 ms a call
    three_passes = [Profile(ops=["aten::abs", "aten::add", "aten::mul"],
                            top_op_ms={"aten::abs": 0.1, "aten::add": 0.1, "aten::mul": 0.046})]
    assert hidden_library_evidence(sampled(library=1200, calls=100), three_passes, relu) == []


def test_hidden_library_time_counts_only_where_the_calls_sampled_can_tell_it():
    """Sampled sparsely (every 2 ms), 100 calls give a candidate hiding 0.37 ms a call 18 samples:
    too few to tell half of it from none; 500 calls, 92."""
    reference = sampled(library=1344, calls=224)  # 0.3 ms a call
    assert library_to_tell_ms(reference) == pytest.approx(0.15)

    def sparse(calls: int) -> CpuSamples:
        return CpuSamples(period_ms=2.0, samples=round(calls * 0.4 / 2), library=round(calls * 0.37 / 2), calls=calls)
    assert hidden_library_evidence(sparse(100), [Profile(ops=[])], reference) == []
    assert not sparse(100).tells(0.185) and sparse(500).tells(0.185)
    assert "no recorded operator explains" in hidden_library_evidence(sparse(500), [Profile(ops=[])], reference)[0]
    assert library_to_tell_ms(sampled(library=40, calls=4)) == 0.0  # too few samples of the reference's to go by


def test_a_candidate_whose_threads_could_not_be_sampled_where_the_reference_convicts_is_untold():
    """Its sampling refused (600 idle threads past the harness's limit on open files, 2026-12-05)
    where the reference's, sampled alike, would have convicted hidden library work: the rule could
    not be applied. Not where the reference's says nothing either, nor where nothing was refused."""
    reference, refusal = sampled(library=1344, calls=224), "perf_event_open: Too many open files; 603 threads on 2 CPUs"
    assert untold_library(refusal, [(sampled(library=472, calls=64), reference), (None, reference)]) == refusal
    assert untold_library(refusal, [(None, reference), (sampled(library=472, calls=64), None)]) == refusal
    assert untold_library(refusal, [(None, sampled(library=2000, calls=10_000))]) is None  # 0.01 ms a call: no rule
    assert untold_library(refusal, [(None, None)]) is None
    assert untold_library(None, [(None, reference)]) is None  # not sampled at all (a GPU run)


def test_a_reference_with_little_library_time_says_nothing_about_hidden_work():
    """On a problem of microseconds, dispatch and allocation are most of any call's library time
    (an honest candidate's as much as the reference's); and too few samples say nothing."""
    quick = sampled(library=2000, calls=10_000)  # 0.01 ms a call
    assert hidden_library_evidence(sampled(library=2000, calls=10_000), [Profile(ops=[])], quick) == []
    few = sampled(library=40, calls=4)  # 0.5 ms a call, in 40 samples
    assert hidden_library_evidence(sampled(library=40, calls=4), [Profile(ops=[])], few) == []
    assert hidden_library_evidence(None, [Profile(ops=[])], sampled(library=1344, calls=224)) == []
