#include "report/gates.h"

#include <algorithm>
#include <optional>

#include "report/backend_record.h"

namespace kiln {

std::string_view gate_state_name(GateState s) {
  switch (s) {
    case GateState::kCovered: return "covered";
    case GateState::kStale: return "stale";
    case GateState::kUnknown: return "unknown";
    case GateState::kPartial: return "partial";
    case GateState::kPending: return "pending";
    case GateState::kNotApplicable: return "not_applicable";
  }
  return "?";
}

const std::vector<Gate>& conformance_gates() {
  static const std::vector<Gate> gates = {
      {"storage_round_trip", "allocate, zero, copy to and from the host return the exact bytes",
       {{"cpu", {"CpuStorage.RoundTripIsExact"}, ""}, {"cuda", {"CudaParity.StorageRoundTripAndZeroedAllocations"}, ""},
        {"vulkan", {"VulkanStorage.UploadDownloadRoundTripsEveryByte", "VulkanStorage.AllocateZeroesAndZeroClearsOddSpans"}, ""}},
       {}},
      {"host_transfer_parity", "host <-> device transfers preserve every dtype bit for bit; misuse is a clear error",
       {{"cpu", {"CpuStorage.RoundTripIsExact", "CpuStorage.MisuseIsAClearError"}, ""},
        {"cuda", {"CudaParity.StorageRoundTripAndZeroedAllocations", "CudaSupport.HostTensorsAreRefusedByDeviceKernels"}, ""},
        {"vulkan", {"VulkanStorage.UploadDownloadRoundTripsEveryByte", "VulkanStorage.TransfersLargerThanTheStagingRingArriveWhole", "VulkanStorage.DeviceCopyAndMismatchesNamed"}, ""}},
       {}},
      {"device_op_parity", "norms, embedding gather, elementwise ops and argmax equal a double-precision reference",
       {{"cpu", {"CpuKernels.RmsNormKinds", "CpuKernels.EmbedAndArgmax"}, ""},
        {"cuda", {"CudaParity.RmsNorm", "CudaParity.EmbeddingGather", "CudaParity.AddAndSiluMul", "CudaParity.ArgmaxTiesInfAndNan"}, ""},
        {"vulkan", {"VulkanNorm.EveryKindEqualsCpuWithAndWithoutTheResidual", "VulkanElementwise.EmbedEqualsCpuForEveryTableDtype", "VulkanElementwise.BinaryOpsEqualCpuOnStridedRows", "VulkanSampling.ArgmaxTakesTheFirstLargestAndNeverNaN"}, ""}},
       {}},
      {"matmul_linear_parity",
       "every projection shape and weight dtype equals a double-precision reference, and so do a batch's LoRA "
       "deltas (rows with different adapters, stacks, none)",
       {{"cpu", {"CpuKernels.MatmulMatchesDoubleReference", "CpuKernels.MatmulWritesStridedRows", "CpuLoraDelta.MatchesDoubleReference"}, ""},
        {"cuda", {"CudaParity.Matmul", "CudaLoraDelta.MatchesCpuFacet", "CudaLoraForward.RowsWithDifferentAdaptersMatchCpu"}, ""},
        {"vulkan", {"VulkanLinear.EveryWeightDtypeOnBothPathsEqualsCpu", "VulkanLinear.StridedRowsAndAccumulateEqualCpu", "VulkanLoraDelta.MatchesCpuFacet"}, ""}},
       {"src/model/**"}},
      {"attention_gdn_conv_parity",
       "paged attention, partial RoPE, causal conv, chunked and recurrent GDN equal their references; the whole "
       "forward equals transformers on the fixtures; a tiled prefill equals the untiled forward",
       {{"cpu",
         {"CpuKernels.PartialRopeRotatesOnlyLeadingDims", "CpuKernels.PagedAttentionMatchesDirectSoftmax",
          "CpuKernels.CausalConvContinuesFromState", "Gdn.ChunkedEqualsRecurrentAcrossChunkBoundaries",
          "Gdn.RecurrentMatchesSpecInDouble", "Reference.PrefillLogitsMatchTransformers",
          "Reference.DecodeAfterPrefillMatchesTransformers", "TiledPrefill.ForcedTilesEqualTheUntiledForward",
          "TiledPrefill.ThePolicyTilesAPromptAtTheThresholdAsTheUntiledForward"},
         ""},
        {"cuda",
         {"CudaParity.Rope", "CudaParity.KvWriteAndPagedAttention", "CudaParity.CausalConv1d",
          "CudaParity.GatedDeltaRule", "FlashPrefill.MatchesCpuOnBf16RoundedInputs",
          "CudaModel.PrefillAndDecodeMatchTransformers", "CudaModel.BatchedRowsMatchTheCpuBackend",
          "CudaTiledPrefill.F32FixtureTiledEqualsUntiled", "CudaTiledPrefill.Bf16CheckpointTiledEqualsUntiled"},
         ""},
        {"vulkan", {"VulkanAttention.RopeEqualsCpuOnStridedQkvViews", "VulkanAttention.KvWriteAndAttendEqualCpu", "VulkanConv.CausalConv1dEqualsCpu", "VulkanGdn.RecurrentEqualsCpuRecurrent", "VulkanGdn.ChunkedRequestEqualsCpuChunked", "VulkanModel.PrefillAndDecodeMatchTransformers", "VulkanModel.BatchedRowsMatchTheCpuBackend", "VulkanModel.TiledPrefillEqualsTheUntiledForward"}, ""}},
       {"src/model/**"}},
      {"support_mismatch_audit", "no support predicate is contradicted by its method (audit over every facet)",
       {{"cpu", {"SupportAudit.CpuBackendHasNoMismatches", "SupportAudit.BrokenPredicateIsCaught"}, ""},
        {"cuda", {"CudaAudit.NoMismatches", "CudaSupport.MatmulPredicateAgreesWithMethod",
                  "CudaSupport.ConvGdnAndAttentionPredicatesAgreeWithMethods"}, ""},
        {"vulkan", {"VulkanAudit.NoMismatches"}, ""}},
       {"src/report/support_audit*", "src/report/audit_case.h"}},
      {"optimizer_parity", "SGD, AdamW and Muon steps equal the f32 reference",
       {{"cpu",
         {"Optimizer.MuonMatchesLiteralNewtonSchulzWideAndTall", "Optimizer.MuonWithoutNesterovMatchesReference",
          "Optimizer.AdamWMatchesReferenceOverSteps", "Optimizer.SgdMatchesReferenceOverSteps",
          "Optimizer.SgdHandComputed", "Optimizer.AdamWFirstStepHandComputed"},
         ""},
        {"cuda",
         {"CudaTrainingOps.OptimizersMatchCpuOverThreeSteps", "CudaTrainingOps.OptimizerRejectsBadHyperparametersAsTheCpuDoes",
          "CudaTrainingOps.MuonAboveRank256IsDeclinedSayingWhy"},
         ""},
        {"vulkan", {}, "the vulkan backend does not train"}},
       {"src/train/**"}},
      {"replay_parity", "a replayed decode step equals the eager one",
       {{"cpu", {}, "the CPU runs every step eagerly; there is nothing to replay"},
        // Bit for bit against the same padded step run eagerly, over row buckets 1, 4, 8, 16 and
        // a K/V block boundary; f32 and bf16 checkpoints.
        {"cuda", {"CudaReplay.F32FixtureReplayEqualsTheEagerStep", "CudaReplay.Bf16CheckpointReplayEqualsTheEagerStep"}, ""},
        {"vulkan", {"VulkanReplay.F32FixtureReplayEqualsTheEagerStep", "VulkanReplay.Bf16CheckpointReplayEqualsTheEagerStep"}, ""}},
       {"src/model/**"}},
      {"one_step_training_proof", "one LoRA training step lowers the loss and changes the adapter as the reference does",
       {{"cpu",
         {"LoraTrainer.GradientsMatchTransformersAndPeft", "LoraTrainer.HybridModelMatchesFiniteDifferencesOfTheServingForward",
          "TrainEndToEnd.SftWithAdamWLearnsTheContinuations", "TrainEndToEnd.SftWithMuonLearnsTheContinuations"},
         ""},
        {"cuda",
         {"CudaTraining.GradientsMatchTransformersAndPeft", "CudaTraining.F32HybridGradientsMatchTheCpuReference",
          "CudaTraining.Bf16HybridGradientsMatchTheCpuReference", "CudaTraining.OneStepMatchesTheCpuReference",
          "CudaTraining.StepKeepsHostFallbackAtZero"},
         ""},
        {"vulkan", {}, "the vulkan backend does not train: training jobs are refused (501)"}},
       {"src/model/**", "src/train/**"}},
      {"no_unexpected_host_fallback",
       "real decode and a real training step on the accelerator leave every host-fallback counter at zero",
       {{"cpu", {}, "the CPU is the reference; it has no host fallback"},
        {"cuda", {"CudaModel.PrefillAndDecodeMatchTransformers", "CudaTraining.StepKeepsHostFallbackAtZero"}, ""},
        // The engine test also drives the counted host path itself: the same requests through a
        // test backend over the device whose sampler declines them count one round trip a step.
        {"vulkan",
         {"VulkanModel.PrefillAndDecodeMatchTransformers",
          "VulkanEngine.ConstrainedRowsOnTheDeviceOrTheCountedHostPathEqualTheCpu"},
         ""}},
       {"src/model/**", "src/train/**"}},
      {"decode_launches_per_token", "a decode step is one graph replay (or a bounded launch count) per token",
       {{"cpu", {}, "the CPU launches no kernels"},
        // Counted launches of each decode step == the forward's op count (58 on gqa_untied), under the bound.
        // Replayed (the default): one graph replay and one kernel launch (the argmax) per step.
        {"cuda", {"CudaEngine.DecodeLaunchesPerTokenEqualTheOpCountUnderTheBound", "CudaEngine.SteadyDecodeStepIsOneGraphReplay"}, ""},
        // Replayed: one command buffer submitted and one dispatch (the argmax) per step.
        {"vulkan", {"VulkanEngine.SteadyDecodeStepIsOneReplay"}, ""}},
       {"src/model/**", "src/engine/**"}},
      {"matmul_algorithm_cache_reporting", "the GEMM algorithm cache reports its hits and misses",
       {{"cpu", {}, "OpenBLAS has no algorithm cache"}, {"cuda", {"CudaParity.MatmulAlgorithmCacheHitsOnRepeat"}, ""},
        {"vulkan", {}, "the vulkan matmul picks its shader by shape; there is no algorithm cache"}},
       {}},
      {"hardware_latency_thresholds", "microbenchmarks of the 4B shapes stay under locked thresholds",
       {{"cpu", {}, "thresholds are locked for the accelerator only"},
        // tests/backend/cuda/latency_thresholds/<device>.json: that device's medians x 1.25 (docs/cuda.md).
        {"cuda",
         {"LatencyThresholds.FileLocksEveryCaseAtMedianWithHeadroom", "CudaLatency.DecodeQkvProjection",
          "CudaLatency.PrefillQkvProjectionM256", "CudaLatency.PrefillGateUpM256", "CudaLatency.LmHeadM1",
          "CudaLatency.PagedDecodeAttentionContext512", "CudaLatency.PagedDecodeAttentionContext4096",
          "CudaLatency.GdnDecodeStep", "CudaLatency.GdnChunkedPrefill4096"},
         ""}},
       {},
       true},
      {"report_freshness", "the checked-in capability report equals what the generator produces",
       {{"cpu", {"Capabilities.CheckedInReportIsFresh"}, ""}},
       {"src/report/**", "src/backend/**"}},
  };
  return gates;
}

std::vector<std::string> backend_source_paths(const std::string& backend) {
  return {"src/backend/*", "src/backend/" + backend + "/**"};
}

std::vector<std::string> gate_source_paths(const Gate& gate, const std::string& backend) {
  // Every backend's row rests on core, the backend layer's shared files and its own folder.
  std::vector<std::string> src = {"src/core/**"};
  const std::vector<std::string> own = backend_source_paths(backend);
  src.insert(src.end(), own.begin(), own.end());
  src.insert(src.end(), gate.covers.begin(), gate.covers.end());
  std::vector<std::string> out;
  for (const std::string& p : src) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    // tests/ mirrors src/: a changed test is changed evidence too.
    const std::string test = "tests/" + p.substr(4);
    if (std::find(out.begin(), out.end(), test) == out.end()) out.push_back(test);
  }
  if (!gate.reads_run_time_data) out.push_back(std::string("!") + kRunTimeTestData);
  return out;
}

Result<std::vector<EvidenceFile>> load_evidence(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(std::vector<JsonFile> files, read_json_tree(dir));
  std::vector<EvidenceFile> out;
  for (JsonFile& f : files) {
    if (is_backend_record(f.value)) continue;  // a backend's recorded report section, not test results
    KILN_ASSIGN_OR_RETURN(EvidenceRecord record, parse_evidence_record(f.value, f.where));
    out.push_back({f.where, std::move(record)});
  }
  return out;
}

std::string gate_command(const GateBackend& b) {
  if (b.tests.empty()) return "";
  std::string alternatives;
  for (const auto& t : b.tests) alternatives += (alternatives.empty() ? "" : "|") + t;
  // CUDA's tests run in the accelerator machine's build; Vulkan's wherever a Vulkan device is
  // (lavapipe included) under their own label.
  const std::string where = b.backend == "cuda" ? "build-device -L gpu" : b.backend == "vulkan" ? "build -L vulkan" : "build";
  return "ctest --test-dir " + where + " --output-on-failure -R '^(" + alternatives + ")$'";
}

GateStatus evaluate_gate(const Gate& gate, const GateBackend& b, const std::vector<EvidenceFile>& evidence,
                         const SourceHistory* history) {
  GateStatus s;
  s.command = gate_command(b);
  if (!b.not_applicable.empty()) {
    s.state = GateState::kNotApplicable;
    s.reason = b.not_applicable;
    return s;
  }
  if (b.tests.empty()) {
    s.state = GateState::kPending;
    s.reason = "no test proves this on " + b.backend + " yet";
    return s;
  }
  // A result counts only from a run where the backend was really present.
  auto present = [&](const EvidenceFile& f) { return b.backend == "cpu" || f.record.device(b.backend) != nullptr; };
  auto passed_in = [&](const EvidenceFile& f, const std::string& test) {
    auto it = f.record.tests.find(test);
    return it != f.record.tests.end() && it->second == "passed" && present(f);
  };
  // What a run's evidence stands apart by: the CUDA target, the Vulkan device and driver.
  auto target_of = [&](const EvidenceFile& f) {
    const EvidenceDevice* d = f.record.device(b.backend);
    return d == nullptr ? std::string() : b.backend == "cuda" ? d->target : d->device;
  };
  // Each run's freshness for this gate's paths, asked once per run.
  const std::vector<std::string> paths = gate_source_paths(gate, b.backend);
  std::vector<std::optional<FreshnessVerdict>> fresh(evidence.size());
  auto freshness_of = [&](size_t i) -> const FreshnessVerdict& {
    if (!fresh[i]) fresh[i] = evidence_freshness(evidence[i].record, paths, history);
    return *fresh[i];
  };
  // Fresh proofs first, then unknown, then stale; among equals the last file (paths sort by folder).
  auto rank = [](Freshness f) { return f == Freshness::kFresh ? 2 : f == Freshness::kUnknown ? 1 : 0; };
  int passed = 0;
  std::vector<std::string> missing;
  std::optional<size_t> stale, unknown;  // the first proof of each kind
  for (const auto& test : b.tests) {
    std::optional<size_t> proof;
    for (size_t i = 0; i < evidence.size(); ++i)
      if (passed_in(evidence[i], test) &&
          (!proof || rank(freshness_of(i).state) >= rank(freshness_of(*proof).state)))
        proof = i;
    if (!proof) {
      missing.push_back(test);
      continue;
    }
    ++passed;
    const EvidenceFile& f = evidence[*proof];
    if (std::find(s.evidence.begin(), s.evidence.end(), f.path) == s.evidence.end()) s.evidence.push_back(f.path);
    const Freshness state = freshness_of(*proof).state;
    if (state == Freshness::kStale && !stale) stale = proof;
    if (state == Freshness::kUnknown && !unknown) unknown = proof;
  }
  // The CUDA targets (Vulkan drivers) whose own runs passed every test: each one's evidence stands
  // apart, and says when its freshest runs are stale or of unknown freshness.
  if (b.backend == "cuda" || b.backend == "vulkan") {
    std::vector<std::string> targets;
    for (const auto& f : evidence)
      if (present(f) && !target_of(f).empty() && std::find(targets.begin(), targets.end(), target_of(f)) == targets.end())
        targets.push_back(target_of(f));
    for (const auto& target : targets) {
      int worst = 2;  // the rank of the least fresh test's freshest run on this target; -1: a test never passed
      for (const std::string& test : b.tests) {
        int best = -1;
        for (size_t i = 0; i < evidence.size(); ++i)
          if (target_of(evidence[i]) == target && passed_in(evidence[i], test))
            best = std::max(best, rank(freshness_of(i).state));
        worst = std::min(worst, best);
      }
      if (worst >= 0) s.targets.push_back(target + (worst == 2 ? "" : worst == 1 ? " (unknown)" : " (stale)"));
    }
  }
  if (passed == static_cast<int>(b.tests.size())) {
    s.state = stale ? GateState::kStale : unknown ? GateState::kUnknown : GateState::kCovered;
    s.reason = "all " + std::to_string(passed) + " tests passed with the backend present";
    for (size_t i = 0; i < s.targets.size(); ++i) s.reason += (i == 0 ? "; on " : ", ") + s.targets[i];
    if (const std::optional<size_t> first = stale ? stale : unknown)
      s.reason += "; but " + evidence[*first].path + " " + freshness_of(*first).why;
  } else {
    s.state = passed ? GateState::kPartial : GateState::kPending;
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    s.reason = "no passing result recorded for: " + list;
  }
  return s;
}

}  // namespace kiln
