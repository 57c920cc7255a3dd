"""The kernel table of a profiled GPU step: families read from kernels' names as each
framework's libraries and compilers write them, and the per-step arithmetic."""

import pytest

from compare.run import kernels, phases


@pytest.mark.parametrize("name, expected", [
    # PyTorch eager: cuDNN and ATen's own kernels
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
     "convolution"),
    ("sm90_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", "convolution"),
    ("cudnn::detail::wgrad_alg0_engine<__half, 512, 6, 5, 3, 3, 3, false, 512>",
     "convolution"),
    ("cudnn::bn_fw_tr_1C11_kernel_NCHW<__half, float, 512, true, 1>", "normalization"),
    ("void at::native::batch_norm_collect_statistics_kernel<float>", "normalization"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<c10::Half>>",
     "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::Half>", "pooling"),
    ("void at::native::multi_tensor_apply_kernel<TensorListMetadata<3>, SGDFunctor>",
     "optimizer"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_tn_align8>",
     "matmul"),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1", "matmul"),
    ("void cudnn::ops::nchwToNhwcKernel<__half, __half, float, false, true>", "layout"),
    # torch.compile's Triton kernels: by what they do, whatever ops their names list
    ("triton_poi_fused__native_batch_norm_legit_functional_convolution_relu_3",
     "generated pointwise"),
    ("triton_red_fused__native_batch_norm_legit_functional_7", "generated reduction"),
    ("triton_per_fused_add_mean_1", "generated reduction"),
    ("triton_tem_fused_mm_0", "matmul"),
    # XLA's fusions and its Triton GEMMs
    ("loop_multiply_fusion_2", "generated pointwise"),
    ("loop_convert_fusion", "generated pointwise"),
    ("input_reduce_fusion_11", "generated reduction"),
    ("loop_reduce_window_fusion", "pooling"),
    # TensorFlow's own kernels, outside XLA
    ("Mul_GPU_DT_FLOAT_DT_FLOAT_kernel", "elementwise"),
    ("AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel", "elementwise"),
    ("gemm_fusion_dot_3", "matmul"),
    # copies, collectives, the rest
    ("Memcpy HtoD (Pinned -> Device)", "copy"),
    ("MemcpyH2D", "copy"),
    ("Memset (Device)", "copy"),
    ("ncclDevKernel_AllReduce_Sum_f16_RING_LL", "all_reduce"),
    ("redzone_checker", "other"),
])
def test_each_kernel_name_falls_in_its_family(name, expected):
    assert kernels.family(name) == expected
    assert expected in kernels.FAMILIES


def test_per_step_adds_each_kernels_launches_and_ranks_the_longest():
    launches = ([("sm90_xmma_fprop_implicit_gemm", 0.003)] * 4      # 12 ms over 2 steps
                + [("triton_poi_fused_relu_0", 0.001)] * 6            # 6 ms
                + [("sm90_xmma_dgrad_implicit_gemm", 0.002)]          # 2 ms, a convolution too
                + [("Memcpy HtoD (Pinned -> Device)", 0.0005)] * 2)   # 1 ms
    table = kernels.per_step(launches, steps=2, step_ms=20.0)
    assert table["total_ms"] == pytest.approx(10.5)
    assert table["launches"] == pytest.approx(6.5)
    assert table["families_ms"] == pytest.approx(  # a kind adds up its kernels
        {"convolution": 7.0, "generated pointwise": 3.0, "copy": 0.5})
    first, second, third, fourth = table["top"]
    assert (first["name"], first["ms"], first["calls"], first["share"]) == (
        "sm90_xmma_fprop_implicit_gemm", pytest.approx(6.0), 2.0, pytest.approx(0.3))
    assert (second["family"], second["ms"], second["calls"]) == (
        "generated pointwise", pytest.approx(3.0), 3.0)
    assert (third["name"], third["ms"], third["calls"]) == (
        "sm90_xmma_dgrad_implicit_gemm", pytest.approx(1.0), 0.5)
    assert fourth["share"] == pytest.approx(0.025)


def test_per_step_keeps_the_top_kernels_and_shortens_long_names():
    launches = [(f"k{i:02d}" + "x" * 300, (i + 1) * 1e-4) for i in range(20)]
    table = kernels.per_step(launches, steps=1, step_ms=0.0)
    assert len(table["top"]) == kernels.TOP_KERNELS
    assert table["top"][0]["name"].startswith("k19")
    assert table["top"][-1]["name"].startswith(f"k{20 - kernels.TOP_KERNELS:02d}")
    assert all(len(k["name"]) == kernels.NAME_LENGTH for k in table["top"])
    assert all(k["share"] == 0.0 for k in table["top"])  # no step time: no share
    assert table["total_ms"] == pytest.approx(sum(range(1, 21)) * 0.1)


def test_split_carries_the_kernel_table_of_the_device_events():
    ms = 1e-3
    capture = phases.Capture(host={"forward": [(0, 4 * ms)]},
                             device={"forward": [(1 * ms, 3 * ms)]},
                             device_busy=[(1 * ms, 3 * ms)],
                             device_events=[("cudnn::bn_fw_tr_1C11_kernel_NCHW", 2 * ms)])
    split = phases.split(capture, steps=1, wall_s=8 * ms)
    assert split["kernels"]["families_ms"] == pytest.approx({"normalization": 2.0})
    assert split["kernels"]["top"][0]["share"] == pytest.approx(0.25)
    host_only = phases.split(phases.Capture(host={"forward": [(0, 4 * ms)]}), 1, 8 * ms)
    assert host_only["kernels"] is None


def test_the_report_sets_each_frameworks_kernel_kinds_and_longest_kernels_side_by_side(
        tmp_path):
    """Two GPU runs whose profiles read kernels: one row per run in the kinds' table, with the
    kinds either run has, and each run's longest kernels by name."""
    from report_runs import H100, PASSED, fake_result, write_runs

    from compare.report import builder
    launches = {"tf": [("sm90_xmma_fprop_implicit_gemm", 0.004), ("loop_add_fusion", 0.001)],
                "torch": [("sm90_xmma_fprop_implicit_gemm", 0.003),
                          ("cudnn::bn_fw_tr_1C11_kernel_NCHW", 0.002)]}
    runs = []
    for framework, events in launches.items():
        result = fake_result(framework, 0, 10.0, 0.5, environment=H100)
        result["profile"] = {"steps": 1, "step_ms": 10.0, "clock": "device",
                             "phases_ms": {}, "other_ms": 0.0, "host_phases_ms": None,
                             "device_idle_ms": 1.0, "input_stall_ms": 0.0,
                             "kernels": kernels.per_step(events, 1, 10.0)}
        runs.append(result)
    write_runs(tmp_path, runs, PASSED)
    built = builder.build([tmp_path])
    text = next(p for p in built.paths if p.name == "report.md").read_text()
    kinds = text.split("## What the GPU ran, by kind of kernel")[1].split("\n## ")[0]
    assert ("| Framework | Seed | Step | All kernels | Launches | convolution | normalization "
            "| generated pointwise |") in kinds
    assert "| TensorFlow/Keras | 0 | 10.00 ms | 5.00 ms (50%) | 2 | 4.00 ms (40%) |  | " \
           "1.00 ms (10%) |" in kinds
    assert "| PyTorch | 0 | 10.00 ms | 5.00 ms (50%) | 2 | 3.00 ms (30%) | 2.00 ms (20%) |  |" \
        in kinds
    longest = text.split("## The longest kernels")[1].split("\n## ")[0]
    assert "| PyTorch | 0 | 2 | `cudnn::bn_fw_tr_1C11_kernel_NCHW` | normalization | 2.00 ms " \
           "| 1 | 20.0% |" in longest
