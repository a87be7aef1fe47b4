// One training run, start to finish, without HTTP: the sequences of an SFT or GRPO job, the LoRA
// and optimizer settings, and the loop (epochs of forward, loss, backward, optimizer step) that
// turns them into a trained adapter. The job queue (train/job_queue.h) runs these in the
// background; tests and `kiln train` call run_training directly.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/training_facets.h"
#include "engine/device_runner.h"
#include "model/lora_adapter.h"
#include "model/qwen35.h"
#include "train/lora_trainer.h"
#include "train/lr_schedule.h"

namespace kiln {

enum class AdvantageMode : uint8_t { kDrGrpo, kVanilla };
enum class KlEstimator : uint8_t { kNone, kK1, kK3 };

// A GRPO group: completions of one prompt, each a whole sequence (prompt + completion, roles
// marking the completion's tokens as kTarget and any environment output as kObservation) with
// its reward, and optionally the behaviour policy's log-probabilities of its tokens.
struct GrpoCompletion {
  TrainSequence sequence;
  double reward = 0;
  std::vector<float> behavior_logp;  // empty: rho = 1 in value
  // OPD: the teacher's log-probabilities of the sequence's tokens, indexed as `behavior_logp`
  // (entries at kTarget tokens are read); empty elsewhere.
  std::vector<float> teacher_logp;
};
struct GrpoGroup {
  std::vector<GrpoCompletion> completions;
};

// An online run's source of groups: before each step, `sample` draws the step's groups from the
// adapter as it stands (on-policy), scores them (rewards; OPD: the teacher's log-probabilities), and
// returns them with the step's mean reward (nullopt: no reward). It runs on the run's thread, not
// through the DeviceRunner: a server submits generation requests to its engine, which reads
// `adapter` in its cycles while the run waits (no step changes it meanwhile).
struct RolloutSource {
  struct Batch {
    std::vector<GrpoGroup> groups;
    std::optional<double> mean_reward;
    // Where the rollout's time went (wall seconds): generating the completions, scoring them
    // (decoding and the reward), the OPD teacher's log-probabilities.
    double sampling_seconds = 0, scoring_seconds = 0, teacher_seconds = 0;
  };
  std::function<Result<Batch>(int64_t step, const LoraAdapter& adapter, const std::atomic<bool>& cancel)> sample;
  int64_t steps = 0;  // optimizer steps, each over its own rollout
};

struct TrainSpec {
  // kOpd: on-policy distillation over groups whose completions carry the teacher's log-probabilities.
  enum class Kind : uint8_t { kSft, kGrpo, kOpd } kind = Kind::kSft;
  LoraConfig lora;                       // rank 16, alpha 32, every target by default
  OptimizerKind optimizer = OptimizerKind::kMuon;
  OptimizerHyper hyper;                  // hyper.lr: the schedule's peak rate
  int64_t epochs = 1;
  // Sequences per micro-batch (GRPO: whole groups, as many as fit, at least one; packing: packed
  // sequences), and micro-batches per optimizer step: their gradients add up, and the losses'
  // means run over the whole step, so k micro-batches step as one batch of all k would.
  int64_t batch_sequences = 1;
  int64_t accumulation_steps = 1;
  // The global gradient norm is clipped to this before each step (0: no clipping); it is
  // measured and reported either way.
  float max_grad_norm = 1.f;
  LrScheduleSpec lr_schedule;            // cosine decay without warmup
  // SFT: sequences packed into sequences of at most this many tokens, each a unit of
  // batch_sequences (train/packing.h); 0: no packing.
  int64_t pack_tokens = 0;
  // This fraction of the items (SFT sequences, GRPO groups kept) is held out of training; its loss
  // (forward only, the means over the whole held-out set) is taken after every `eval_every` steps
  // (0: none but the last) and after the last step.
  double eval_fraction = 0;
  int64_t eval_every = 0;
  uint64_t seed = 0;
  std::vector<TrainSequence> sft;        // kSft
  std::vector<GrpoGroup> grpo;           // kGrpo
  AdvantageMode advantage = AdvantageMode::kDrGrpo;
  float clip_epsilon = 0.2f;
  float kl_coeff = 0.1f;
  KlEstimator kl = KlEstimator::kNone;
  float echo_lambda = 0.05f;
  // OPD: the coefficient of the GRPO group advantage (from the completions' rewards) added to each
  // token's teacher - student advantage; 0: distillation alone.
  float opd_reward_coeff = 0.f;
  // Online runs: groups sampled before each step instead of `grpo` (kGrpo, kOpd); `epochs` and the
  // held-out split do not apply.
  RolloutSource rollout;
  // Continue from these factors (a copy, in f32; its LoraConfig then wins over `lora`), else a fresh init.
  const LoraAdapter* base_adapter = nullptr;
  TrainerOptions trainer;                // GDN chunk and activation-checkpoint segments of the LoraTrainer
  // The run fails once it has run this long (0: no limit), checked before each step.
  double max_seconds = 0;
  // Every `checkpoint_interval` steps (0: never), `checkpoint` gets the step and the adapter as it
  // stands, copied to the host inside the step's device work; it runs after that work on the
  // caller's thread (a server's job writes no file on the engine's thread), and its error ends the
  // run. (The API's checkpoint_interval: the job saves a partial adapter.)
  int64_t checkpoint_interval = 0;
  std::function<Status(int64_t step, const HostLoraAdapter& adapter)> checkpoint;
  // Tests only: builds a stand-in trainer over the run's adapter; empty: LoraTrainer::create.
  std::function<Result<std::unique_ptr<LoraTrainer>>(Qwen35Model&, LoraAdapter&)> make_trainer;
};

// An intermediate adapter a job published (train/train_checkpoints.h).
struct TrainCheckpoint {
  int64_t step = 0;
  std::string path;
};

struct TrainProgress {
  int64_t step = 0, total_steps = 0;
  double loss = 0;
  double tokens_per_second = 0;
  std::vector<TrainCheckpoint> checkpoints;  // written so far; filled in by the job, not run_training
  double grad_norm = 0;             // the global gradient norm, before clipping
  double lr = 0;                    // the step's learning rate
  std::optional<double> eval_loss;  // the held-out loss, where the step was an eval point
  std::optional<double> mean_reward;  // online runs with a reward: the step's rollout's mean reward
  std::optional<double> reverse_kl;   // OPD: the step's rollout's mean per-token reverse KL (student || teacher)
};

// Where one step's wall time went. Online runs: the rollout (its own split, RolloutSource::Batch),
// then the behaviour policy's log-probabilities of it. Every run: forward and backward of each
// micro-batch through the global gradient norm (which reads a value back, so the device's work
// is done), then the optimizer (the clipped steps of every factor, the gradients zeroed, the
// device synchronised). A step that trains nothing (an online GRPO step whose groups' rewards
// are all equal) has zero forward/backward and optimizer time.
struct StepPhases {
  double sampling = 0, scoring = 0, teacher = 0, behaviour_logp = 0, forward_backward = 0, optimizer = 0;
  int64_t sampled_tokens = 0;  // online runs: the completions' tokens the rollout generated
  int64_t trained_tokens = 0;  // tokens of the sequences the step trained on (prompts included)
};

struct EvalPoint {
  int64_t step = 0;
  double loss = 0;
};

struct TrainResult {
  LoraAdapter adapter;          // the trained factors (f32, on the model's backend)
  std::vector<double> losses;   // one per optimizer step
  std::vector<double> grad_norms, lrs;  // one per optimizer step: the norm before clipping, the rate
  std::vector<EvalPoint> eval_losses;   // one per eval point
  std::vector<double> rewards, reverse_kls;  // online runs: one per step where measured (TrainProgress)
  std::vector<double> step_seconds;  // wall time of each step (forward, loss, backward, optimizer)
  std::vector<StepPhases> step_phases;  // one per optimizer step: where its time went
  double seconds = 0;
  int64_t tokens = 0;
};

// Runs `spec` to completion on `model`'s backend. Its device work goes through `runner`
// in pieces: the setup (the adapter, the trainer, the optimizer's state), then each micro-batch
// (forward, backward; the step's last also the gradient norm and the optimizer) and each batch of
// the held-out loss; the job queue passes a runner that takes each piece to the
// engine's thread between serving cycles (the `stable` profile: the writer takes the accelerator
// at a drained boundary); empty: here. `progress` is called after every step; `cancel` is polled
// between steps (a cancelled run returns kFailedPrecondition "cancelled").
Result<TrainResult> run_training(Qwen35Model& model, const TrainSpec& spec,
                                 const std::function<void(const TrainProgress&)>& progress,
                                 const std::atomic<bool>& cancel, const DeviceRunner& runner = {});

}  // namespace kiln
