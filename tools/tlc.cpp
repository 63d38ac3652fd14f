// tlc: compile a .tl model at an optimization level, show what each pass did, emit
// what it made, run it; `tlc ladder` compares every level side by side; `tlc train`
// trains it; `tlc generate` continues a prompt with the KV cache.
//
//   tlc models/tinyllama.tl -O2 --run
//   tlc models/tinyllama.tl -O3 --dump-ir-dir=ir/ --ir-block=0
//   tlc ladder models/tinyllama.tl --chart=ladder.svg
//   tlc train models/tinyllama.tl --batch-size 8 --seq-len 128 --num-steps 50 --learning-rate 3e-4
//   tlc generate models/tinyllama.tl --prompt-ids "1 2 3" --max-new-tokens 16 -O2 --target=cpu
//   tlc generate --checkpoint tinyllama-hf/ --prompt "Once upon a time" --max-new-tokens 64
//   tlc report models/tinyllama.tl -o report/
#include "runtime/AttributeRanges.h"
#include "api/Compile.h"
#include "compiler/BlockView.h"
#include "compiler/codegen/Emitter.h"
#include "compiler/codegen/Persistent.h"
#include "compiler/Targets.h"
#include "compiler/ModelIO.h"
#include "models/CheckpointModel.h"
#include "passes/Pipelines.h"
#include "passes/Remarks.h"
#include "runtime/Backend.h"
#include "runtime/Checked.h"
#include "runtime/Distributed.h"
#include "runtime/FiniteResults.h"
#include "runtime/FlagRanges.h"
#include "runtime/MappedFile.h"
#include "runtime/OutputFile.h"
#include "runtime/JitBackend.h"
#include "runtime/Progress.h"
#include "runtime/RunInputs.h"
#include "runtime/RunSummary.h"
#include "runtime/TimedForward.h"
#include "tools/CommandLine.h"
#include "tools/IrDumps.h"
#include "tools/Ladder.h"
#include "tools/LadderChart.h"
#include "tools/Generation.h"
#include "tools/RankLauncher.h"
#include "tools/Report.h"
#include "tools/Training.h"

#include <tlc/Error.h>
#include <tlc/Profiler.h>

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <thread>

#include <unistd.h>

namespace cl = llvm::cl;

namespace {

cl::SubCommand ladderCommand("ladder",
                             "compile and run every level (O0..O3) with the same weights and tokens; print the "
                             "workshop's table: kernels, bytes moved, time, speedup, logits against O0");
cl::SubCommand trainCommand("train",
                            "train the model: forward, backward and AdamW each step, on a GPU or the CPU; "
                            "print the loss, samples/s and tokens/s of every step and the peak memory, as the "
                            "workshop's scripts do");
cl::SubCommand generateCommand("generate",
                               "continue a prompt with the KV cache (tl-kv-cache's @prefill and @decode), on a GPU "
                               "or the CPU, greedy or sampled: the new text (token ids without a tokenizer) as it "
                               "comes, then the prefill's and each decode step's speed, the peak memory and the "
                               "kernels a step");
cl::SubCommand reportCommand("report",
                              "write a static site (-o dir/; open dir/index.html from disk) that shows, for every "
                              "level, which kernel each op of the model runs in, what each pass did and why, and "
                              "what fusion bought: the ladder, block graphs, kernels with their source, a pass "
                              "stepper, a roofline and a timeline");
cl::SubCommandGroup everywhere = {&cl::SubCommand::getTopLevel(), &ladderCommand, &trainCommand, &generateCommand,
                                  &reportCommand};
// What compiles one level and may be read after each pass: tlc itself, tlc train and tlc generate.
cl::SubCommandGroup oneLevel = {&cl::SubCommand::getTopLevel(), &trainCommand, &generateCommand};

cl::OptionCategory compileCategory("Compiling");
cl::OptionCategory irCategory("Reading the IR (stderr, or one file per pass)");
cl::OptionCategory runCategory("Running (--run, and tlc ladder)");
cl::OptionCategory ladderCategory("tlc ladder");
cl::OptionCategory trainCategory("tlc train (as the workshop's scripts: AdamW, random tokens unless --data)");
cl::OptionCategory generateCategory("tlc generate (--seed seeds the weights and the sampling)");

// -- Compiling ---------------------------------------------------------------------
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.tl>"), cl::cat(compileCategory), cl::sub(everywhere));
cl::opt<std::string> checkpointDir("checkpoint",
                                   cl::desc("a Hugging Face Llama checkpoint's directory instead of a .tl file: the "
                                            "graph built from its config.json, the weights read from its safetensors "
                                            "by their names, its tokenizer for tlc generate"),
                                   cl::value_desc("dir"), cl::cat(compileCategory), cl::sub(everywhere));
int optLevel = 0;
cl::opt<int, true> optLevelShort("O", cl::Prefix, cl::location(optLevel), cl::value_desc("n"),
                                 cl::desc("optimization level, -O0..-O3: the workshop's V1..V4 (default -O0)"),
                                 cl::cat(compileCategory), cl::sub(oneLevel));
cl::opt<int, true> optLevelLong("opt-level", cl::location(optLevel), cl::value_desc("n"),
                                cl::desc("the same as -O<n>"), cl::cat(compileCategory), cl::sub(oneLevel));
cl::opt<int64_t> batchSize("batch-size", cl::desc("batch size (default 1)"), cl::init(1), cl::cat(compileCategory),
                           cl::sub(everywhere));
cl::opt<int64_t> seqLen("seq-len",
                        cl::desc("sequence length, up to the model's tl.max_seq_len (default 128, or that "
                                 "maximum when it is smaller)"),
                        cl::init(128), cl::cat(compileCategory), cl::sub(everywhere));
cl::opt<std::string> dtype("dtype", cl::desc("storage dtype of weights and activations: f32 or bf16 (default f32)"),
                           cl::init("f32"), cl::cat(compileCategory), cl::sub(everywhere));

cl::opt<tlc::MatmulPrecision> matmulPrecision(
    "matmul-precision",
    cl::desc("f32 models: how matrix products run, as torch.set_float32_matmul_precision (default high)"),
    cl::init(tlc::MatmulPrecision::High),
    cl::values(clEnumValN(tlc::MatmulPrecision::Highest, "highest", "fp32 FMAs: exact products"),
               clEnumValN(tlc::MatmulPrecision::High, "high",
                          "NVIDIA tensor cores, each operand a high part and a residual (bf16 on sm_90a, tf32 "
                          "elsewhere), three products: about fp32's accuracy"),
               clEnumValN(tlc::MatmulPrecision::Medium, "medium",
                          "NVIDIA tensor cores, one product (of bf16-rounded operands on sm_90a's GEMMs, as "
                          "PyTorch's medium; plain TF32 elsewhere): about 1e-2 relative error, faster")),
    cl::cat(compileCategory), cl::sub(everywhere));

enum class Emit { None, IR, Program, Hip, Schedule };
cl::opt<Emit> emit("emit", cl::desc("what to write, to -o (default none)"), cl::init(Emit::None),
                   cl::values(clEnumValN(Emit::None, "none", "nothing"),
                              clEnumValN(Emit::IR, "ir", "the tl IR after the pipeline"),
                              clEnumValN(Emit::Program, "program", "the Program as JSON (-o dir/ writes dir/program.json)"),
                              clEnumValN(Emit::Hip, "hip", "one <kernel>.hip per distinct kernel and program.json (-o dir/)"),
                              clEnumValN(Emit::Schedule, "schedule",
                                         "O3: the persistent kernel's workers, their tasks and what each waits for "
                                         "(--ir-block=N: one transformer block's)")),
                   cl::cat(compileCategory), cl::sub(everywhere));
cl::opt<std::string> outputPath("o", cl::desc("output file or directory (default -: stdout)"), cl::value_desc("path"),
                                cl::init("-"), cl::cat(compileCategory), cl::sub(everywhere));
cl::opt<std::string> targetArch("target-arch",
                                cl::desc("the GPU to tune the kernels for when compiling ahead: sm_90a (an H100, "
                                         "the default), sm_90, sm_80, gfx90a or gfx942; a run on a GPU tunes for "
                                         "that GPU"),
                                cl::value_desc("arch"), cl::cat(compileCategory), cl::sub(everywhere));
cl::opt<bool> precompile("precompile",
                          cl::desc("JIT-compile every kernel for --target-arch (default sm_90a) into the kernel "
                                   "cache now, with no GPU needed: a later run on such a GPU starts at once"),
                          cl::cat(compileCategory), cl::sub(everywhere));
cl::opt<bool> persistent("persistent",
                          cl::desc("-O3: the forward as one persistent kernel whose tasks are O2's kernels' blocks, "
                                   "each waiting only for what it reads (measured slower so far: docs/megakernel.md)"),
                          cl::cat(compileCategory), cl::sub(everywhere));
cl::opt<bool> gemvChains("gemv-chains",
                         cl::desc("-O3 at a decode step's rows: each block's gate/up GEMM inside its down projection's "
                                  "kernel, h kept on chip (measured slower so far: docs/megakernel.md)"),
                         cl::cat(compileCategory), cl::sub(everywhere));
cl::opt<bool> printKernels("print-kernels", cl::desc("list every kernel of the forward: name, block, FLOPs, bytes"),
                           cl::cat(compileCategory));

// -- Forcing the schedule's choices (hidden: experiments) -------------------------------
cl::OptionCategory scheduleCategory("Forcing the schedule's choices, to measure alternatives (also the TLC_* "
                                    "variables of docs/codegen.md)");
cl::opt<std::string> gemmTile("gemm-tile", cl::desc("mma.sync GEMM tile BMxBNxWARPS_MxWARPS_NxSLICESxSTAGES"),
                              cl::value_desc("tile"), cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<std::string> wgmmaTile("wgmma-tile", cl::desc("sm_90a GEMM tile BMxBNxSTAGES[xSPLITS[xRESIDENT[xPRODUCER]]] (f32: 64 or 128 rows and columns; with a producer, K unsplit)"),
                               cl::value_desc("tile"), cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<std::string> attentionTile("attention-tile",
                                   cl::desc("flash attention tile QTxHB[xMT[xRESIDENT]], or rows: one query row a "
                                            "block in fp32 FMAs on every target (a persistent decode step's default)"),
                                   cl::value_desc("tile"), cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<int> attentionGradRows("attention-grad-rows", cl::desc("attention backward: query rows a block, 8, 16 or 32"),
                               cl::init(0), cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<bool> noWgmma("no-wgmma", cl::desc("sm_90a runs the mma.sync GEMMs"), cl::Hidden, cl::cat(scheduleCategory),
                      cl::sub(everywhere));
cl::opt<bool> noGemv("no-gemv", cl::desc("few-row GEMMs run the tiled paths, not the matrix-vector one"), cl::Hidden,
                     cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<bool> noWeightRing("no-weight-ring",
                           cl::desc("O3's persistent kernel: GEMVs load their own weights, through no weight ring"),
                           cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<bool> noClusters("no-clusters", cl::desc("no thread-block clusters (RMSNorm's backward through the workspace)"),
                         cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<int> gemvSplits("gemv-splits", cl::desc("matrix-vector GEMMs: K split this many ways where it can be"),
                        cl::init(0), cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<int> gemvColumns("gemv-columns",
                         cl::desc("matrix-vector GEMMs: columns a tile, where they hold the epilogue"), cl::init(0),
                         cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<int> gemvChainColumns("gemv-chain-columns",
                              cl::desc("O3's GEMV chains (a decode step's gate/up and down): columns of h a block "
                                       "(a power of two from 8 to 256)"),
                              cl::init(0), cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<int> gemvWarps("gemv-warps", cl::desc("matrix-vector GEMMs of chained kernels: warps a block (4, 8 or 16)"),
                       cl::init(0), cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<bool> gemvTensorCores("gemv-tensor-cores",
                              cl::desc("chained bf16 GEMMs of up to 16 rows, of any width: matrix-vector on NVIDIA "
                                       "tensor cores (the schedule takes it for 3 to 8 rows of narrow GEMMs)"),
                              cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<bool> cacheAttentionFma("cache-attention-fma",
                                cl::desc("decode attention over the KV cache on fp32 FMAs (cache_attention.cuh v2), "
                                         "not tensor cores"),
                                cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<bool> chainCacheAttention("chain-cache-attention",
                                  cl::desc("decode attention over the KV cache launched as a dependent of the QKV "
                                           "GEMM before it (chained), as the block's other kernels are"),
                                  cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<bool> chainTensorCoreGemvs("chain-tensor-core-gemvs",
                                   cl::desc("O3: the tensor-core matrix-vector GEMMs (3 to 16 rows) chained too, their "
                                            "last wave letting the next kernel launch before its wait"),
                                   cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<int> cacheAttentionSplitKeys(
    "cache-attention-split-keys",
    cl::desc("decode attention over the KV cache: a sequence's keys cut into splits of at least this many (whole tiles)"),
    cl::init(0), cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<int> workersPerSM("workers-per-sm", cl::desc("O3: workers of the persistent kernel sharing an SM"),
                          cl::init(0), cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<bool> dependentsAtStart("dependents-at-start",
                                cl::desc("chained kernels let the next one launch at their start"), cl::Hidden,
                                cl::cat(scheduleCategory), cl::sub(everywhere));
cl::opt<bool> gemvDependentsAtEnd("gemv-dependents-at-end",
                                  cl::desc("one-row matrix-vector GEMMs let the next kernel launch after their products, "
                                           "not their last wave before its wait"),
                                  cl::Hidden, cl::cat(scheduleCategory), cl::sub(everywhere));

// -- Reading the IR ------------------------------------------------------------------
cl::opt<bool> printIrAfterAll("print-ir-after-all", cl::desc("print the IR after every pass"), cl::cat(irCategory), cl::sub(oneLevel));
cl::opt<bool> printIrBeforeAll("print-ir-before-all", cl::desc("print the IR before every pass"), cl::cat(irCategory), cl::sub(oneLevel));
cl::list<std::string> printIrAfter("print-ir-after", cl::desc("print the IR after the named passes (e.g. cse)"),
                                   cl::value_desc("pass"), cl::CommaSeparated, cl::cat(irCategory), cl::sub(oneLevel));
cl::opt<bool> printIrAfterChange("print-ir-after-change",
                                 cl::desc("only after passes that changed the IR (also --mlir-print-ir-after-change)"),
                                 cl::cat(irCategory), cl::sub(oneLevel));
cl::opt<std::string> dumpIrDir("dump-ir-dir",
                               cl::desc("write the input and the IR after each pass to numbered files in <dir>: "
                                        "diff two neighbours to see one pass"),
                               cl::value_desc("dir"), cl::cat(irCategory), cl::sub(oneLevel));
// --remarks: both kinds; =fused or =missed, one of them (checked in checkFlags).
cl::opt<std::string> remarks("remarks",
                             cl::desc("print what each fusion pass fused and what it left apart, and why, as clang's "
                                      "-Rpass (=fused or =missed: only those)"),
                             cl::value_desc("fused|missed"), cl::ValueOptional, cl::cat(irCategory), cl::sub(oneLevel));
cl::opt<int> irBlock("ir-block", cl::desc("show transformer block <n> only (the others hold the same ops), for the "
                                          "printed IR, the dump files and --emit=ir"),
                     cl::value_desc("n"), cl::init(-1), cl::cat(irCategory), cl::sub(oneLevel));

// -- Running -------------------------------------------------------------------------
cl::opt<bool> run("run", cl::desc("run the forward pass and print a summary"), cl::cat(runCategory));
cl::opt<std::string> target("target",
                            cl::desc("where to run: auto (a GPU if one answers, else cpu), cuda, hip or cpu "
                                     "(default auto)"),
                            cl::init("auto"), cl::cat(runCategory), cl::sub(everywhere));
cl::opt<int> iterations("iterations",
                        cl::desc("timed forwards after a warm-up; the median is reported (default 1 for --run: "
                                 "one forward, no warm-up; 3 for ladder)"),
                        cl::init(1), cl::cat(runCategory), cl::sub(everywhere));
cl::opt<uint64_t> seed("seed", cl::desc("seed of the random weights and token ids (default 0)"), cl::init(0),
                       cl::cat(runCategory), cl::sub(everywhere));
cl::opt<std::string> weightsPath("weights",
                                 cl::desc("load weights from a safetensors file with Hugging Face Llama keys "
                                          "(default: seeded random, normal 0.02)"),
                                 cl::value_desc("file"), cl::cat(runCategory), cl::sub(everywhere));
cl::opt<std::string> saveWeightsPath("save-weights",
                                     cl::desc("write the weights used (tlc train: the trained weights) to a "
                                              "safetensors file"),
                                     cl::value_desc("file"), cl::cat(runCategory), cl::sub(oneLevel));
cl::opt<std::string> saveLogitsPath("save-logits",
                                    cl::desc("write the logits as a float32 .npy file (numpy.load reads it)"),
                                    cl::value_desc("file.npy"), cl::cat(runCategory));
cl::opt<std::string> tokensPath("tokens",
                                cl::desc("read batch x seq token ids (whitespace-separated) from a file "
                                         "(default: seeded random)"),
                                cl::value_desc("file"), cl::cat(runCategory), cl::sub(everywhere));
cl::opt<int> threads("cpu-threads", cl::desc("CPU backend threads (default 0: every core)"), cl::init(0),
                     cl::cat(runCategory), cl::sub(everywhere));
cl::opt<tlc::PersistentOnCpu> cpuSchedule(
    "cpu-schedule",
    cl::desc("CPU: how O3's persistent kernel runs (default parts: each part whole, in order)"),
    cl::init(tlc::PersistentOnCpu::Parts),
    cl::values(clEnumValN(tlc::PersistentOnCpu::Parts, "parts", "each part whole, in order"),
               clEnumValN(tlc::PersistentOnCpu::Workers, "workers",
                          "task by task as the workers take turns, each when its waits are done (checks the schedule)"),
               clEnumValN(tlc::PersistentOnCpu::Random, "random",
                          "task by task, a ready worker at random (seeded by --seed)")),
    cl::Hidden, cl::cat(runCategory), cl::sub(everywhere));
cl::opt<bool> noCache("no-cache", cl::desc("GPU: JIT-compile every kernel, ignoring the disk cache"),
                      cl::cat(runCategory), cl::sub(everywhere));
cl::opt<bool> graph("graph", cl::desc("GPU: replay the forward as one captured graph (default on)"), cl::init(true),
                    cl::cat(runCategory), cl::sub(everywhere));
cl::opt<double> persistentTimeout("persistent-timeout",
                                  cl::desc("GPU, O3 --persistent: the longest a task of the persistent kernel waits "
                                           "for another, in seconds; then the run fails naming both (default 5)"),
                                  cl::value_desc("seconds"), cl::init(tlc::BackendOptions{}.persistentTimeoutSeconds), cl::cat(runCategory), cl::sub(everywhere));
cl::opt<bool> debugPersistentCycle("debug-persistent-cycle",
                                   cl::desc("GPU, for tests: the persistent kernel's first task waits for its "
                                            "worker's last (a wait that cannot end: the timeout's report)"),
                                   cl::Hidden, cl::cat(runCategory), cl::sub(everywhere));
cl::opt<bool> profile("profile",
                      cl::desc("time every kernel (GPU events, or wall time on the CPU) and print a table; tlc train: "
                               "of the steps after the first"),
                      cl::cat(runCategory), cl::sub(cl::SubCommand::getTopLevel()), cl::sub(trainCommand));
cl::opt<std::string> tracePath("trace",
                               cl::desc("with --profile: write a Chrome/Perfetto trace (tlc train: the gradients' "
                                        "all-reduces on a track of their own beside the step's kernels)"),
                               cl::value_desc("file.json"), cl::cat(runCategory),
                               cl::sub(cl::SubCommand::getTopLevel()), cl::sub(trainCommand));
cl::opt<std::string> statsCsvPath("stats-csv", cl::desc("with --profile: write per-kernel stats as CSV (as rocprofv3)"),
                                  cl::value_desc("file"), cl::cat(runCategory));
cl::opt<bool> allowNonFinite("allow-nonfinite",
                             cl::desc("report logits or a loss that are not finite (NaN, inf) instead of failing"),
                             cl::cat(runCategory), cl::sub(cl::SubCommand::getTopLevel()), cl::sub(ladderCommand),
                             cl::sub(reportCommand));
cl::opt<tlc::ProgressMode> progress(
    "progress", cl::desc("progress lines for steps over a second (default auto: on a terminal)"),
    cl::init(tlc::ProgressMode::Auto),
    cl::values(clEnumValN(tlc::ProgressMode::Auto, "auto", "on a terminal only"),
               clEnumValN(tlc::ProgressMode::Always, "always", "also in logs: each long step's final line"),
               clEnumValN(tlc::ProgressMode::Never, "never", "none")),
    cl::cat(runCategory), cl::sub(everywhere));

// -- tlc ladder ----------------------------------------------------------------------
cl::opt<std::string> chartPath("chart", cl::desc("also draw the table as an SVG chart"), cl::value_desc("file.svg"),
                               cl::cat(ladderCategory), cl::sub(ladderCommand));

// -- tlc train ------------------------------------------------------------------------
cl::opt<bool> fuseNormGrad("fuse-norm-grad",
                           cl::desc("O2+: RMSNorm's backward in the epilogue of the dX GEMM before it "
                                    "(tl-fuse-norm-grad-gemm; default: where that measured faster, bf16 and not f32; "
                                    "=false keeps the row kernels, =true folds in every dtype)"),
                           cl::cat(trainCategory), cl::sub(trainCommand));
cl::opt<int64_t> numSteps("num-steps", cl::desc("training steps (default 50)"), cl::init(50), cl::cat(trainCategory),
                          cl::sub(trainCommand));
cl::opt<double> learningRate("learning-rate", cl::desc("AdamW learning rate (default 3e-4)"), cl::init(3e-4),
                             cl::cat(trainCategory), cl::sub(trainCommand));
cl::opt<double> weightDecay("weight-decay", cl::desc("AdamW decoupled weight decay (default 0.01)"), cl::init(0.01),
                            cl::cat(trainCategory), cl::sub(trainCommand));
cl::opt<double> beta1("beta1", cl::desc("AdamW decay of the first moment (default 0.9)"), cl::init(0.9),
                      cl::cat(trainCategory), cl::sub(trainCommand));
cl::opt<double> beta2("beta2", cl::desc("AdamW decay of the second moment (default 0.999)"), cl::init(0.999),
                      cl::cat(trainCategory), cl::sub(trainCommand));
cl::opt<double> adamEps("adam-eps", cl::desc("AdamW epsilon (default 1e-8)"), cl::init(1e-8), cl::cat(trainCategory),
                        cl::sub(trainCommand));
cl::opt<double> clipGradNorm("clip-grad-norm",
                             cl::desc("clip the gradients to this global L2 norm before each update (default 0: "
                                      "no clipping)"),
                             cl::init(0), cl::cat(trainCategory), cl::sub(trainCommand));
cl::opt<std::string> dataPath("data",
                              cl::desc("train on the token ids in a file (whitespace-separated), each step the next "
                                       "batch x seq of them, wrapping around (default: a seeded random batch each "
                                       "step)"),
                              cl::value_desc("file"), cl::cat(trainCategory), cl::sub(trainCommand));
cl::opt<std::string> saveGradientsPath("save-gradients",
                                       cl::desc("write the first step's gradients (fp32 copies of what the "
                                                "optimizer reads, before clipping; by checkpoint key) to a "
                                                "safetensors file"),
                                       cl::value_desc("file"), cl::cat(trainCategory), cl::sub(trainCommand));

cl::OptionCategory ranksCategory("tlc train on several ranks (data parallelism; docs/distributed.md)");
cl::opt<int> nproc("nproc",
                   cl::desc("start this many ranks on this machine, one a GPU, as torchrun does: each trains on its "
                            "share of the global batch (--batch-size is a rank's), the gradients averaged among them "
                            "inside the step. Under torchrun, srun or mpirun leave it out: the ranks come from their "
                            "variables. With --emit: the step of one rank of that many (default 1)"),
                   cl::init(1), cl::cat(ranksCategory), cl::sub(trainCommand));
cl::opt<std::string> rendezvousDir("rendezvous-dir",
                                   cl::desc("the ranks meet through Gloo's file store in this directory (empty, on a "
                                            "filesystem every rank sees) instead of the TCP store rank 0 serves at "
                                            "MASTER_ADDR:MASTER_PORT"),
                                   cl::value_desc("dir"), cl::cat(ranksCategory), cl::sub(trainCommand));
cl::opt<double> bucketMib("bucket-mib",
                          cl::desc("the gradients one all-reduce averages, in MiB: each bucket is exchanged as soon "
                                   "as the backward has finished it (default 25, as PyTorch DDP's)"),
                          cl::init(25), cl::cat(ranksCategory), cl::sub(trainCommand));
cl::opt<int> distTimeout("dist-timeout",
                         cl::desc("the longest a rank waits for another (to join, load, exchange), in seconds; a "
                                  "rank that stops is said at once (default 300)"),
                         cl::init(300), cl::cat(ranksCategory), cl::sub(trainCommand));
cl::opt<bool> overlapAllReduce("overlap-all-reduce",
                               cl::desc("GPU: each all-reduce on a stream of its own, so the rest of the backward "
                                        "runs meanwhile (default on; =false: on the compute stream, in order)"),
                               cl::init(true), cl::cat(ranksCategory), cl::sub(trainCommand));

// -- tlc generate ---------------------------------------------------------------------
cl::opt<std::string> promptText("prompt", cl::desc("the prompt's text (needs a tokenizer: the checkpoint's, or "
                                                   "--tokenizer)"),
                                cl::value_desc("text"), cl::cat(generateCategory), cl::sub(generateCommand));
cl::opt<std::string> promptIds("prompt-ids", cl::desc("the prompt's token ids, e.g. \"1 2 3\""), cl::value_desc("ids"),
                               cl::cat(generateCategory), cl::sub(generateCommand));
cl::opt<std::string> promptsPath("prompts",
                                 cl::desc("a file of prompts, one a line (text with a tokenizer, else token ids), "
                                          "generated as one ragged batch"),
                                 cl::value_desc("file"), cl::cat(generateCategory), cl::sub(generateCommand));
cl::opt<std::string> tokenizerPath("tokenizer",
                                   cl::desc("a tokenizer.model (SentencePiece), a tokenizer.json, or a directory "
                                            "holding one (default: the checkpoint's)"),
                                   cl::value_desc("path"), cl::cat(generateCategory), cl::sub(generateCommand));
cl::list<int64_t> stopTokens("stop-token", cl::desc("token ids that end a sequence, besides EOS"),
                             cl::value_desc("ids"), cl::CommaSeparated, cl::cat(generateCategory),
                             cl::sub(generateCommand));
cl::opt<bool> ignoreEos("ignore-eos", cl::desc("go on past EOS, to --max-new-tokens"), cl::cat(generateCategory),
                        cl::sub(generateCommand));
cl::opt<int64_t> maxNewTokens("max-new-tokens", cl::desc("tokens to generate (default 32)"), cl::init(32),
                              cl::cat(generateCategory), cl::sub(generateCommand));
cl::opt<double> temperature("temperature", cl::desc("sampling temperature (default 0: greedy)"), cl::init(0),
                            cl::cat(generateCategory), cl::sub(generateCommand));
cl::opt<int64_t> topK("top-k", cl::desc("sample among the k most likely tokens (default 0: all)"), cl::init(0),
                      cl::cat(generateCategory), cl::sub(generateCommand));
cl::opt<double> topP("top-p", cl::desc("sample among the fewest most likely tokens whose probabilities reach p "
                                       "(default 1)"),
                     cl::init(1), cl::cat(generateCategory), cl::sub(generateCommand));
cl::opt<int64_t> maxContext("max-context", cl::desc("positions the KV cache holds (default 0: the model's "
                                                    "tl.max_seq_len)"),
                            cl::init(0), cl::cat(generateCategory), cl::sub(generateCommand));

// The command line as main was given it.
struct {
  int argc = 0;
  char **argv = nullptr;
} commandLine;

int fail(const std::string &message) {
  llvm::WithColor::error(llvm::errs(), "tlc") << message << "\n";
  return 1;
}


bool wantsIrPrinting() {
  return printIrAfterAll || printIrBeforeAll || !printIrAfter.empty() || !dumpIrDir.empty();
}

std::string modelName();
std::string promptFlag();
const tlc::HfConfig &checkpointConfig();

// tlc train's own flags, and the top-level ones that mean nothing to it.
std::string checkTrainFlags() {
  const cl::Option *forwardOnly[] = {&iterations, &tokensPath, &statsCsvPath};
  for (const cl::Option *option : forwardOnly)
    if (option->getNumOccurrences())
      return fmt::format("--{} does not apply to tlc train{}", option->ArgStr.str(),
                         option == &tokensPath ? " (train on a token file with --data=FILE)" : "");
  if (fuseNormGrad.getNumOccurrences() && fuseNormGrad && optLevel < 2)
    return fmt::format("--fuse-norm-grad needs -O2 or -O3 (the levels that fuse the backward), not -O{}", optLevel);
  if (seqLen < 2) return fmt::format("--seq-len={}: training needs 2 or more tokens a sequence (each predicts the next)",
                                     seqLen.getValue());
  struct Bound {
    const cl::opt<double> &option;
    bool valid;
    const char *range;
  };
  // The ranges tl.adamw accepts (runtime/AttributeRanges.h), reported as flags.
  for (const Bound &bound : {Bound{learningRate, tlc::isValidPositive(learningRate), tlc::kPositiveRange},
                             Bound{weightDecay, tlc::isValidWeightDecay(weightDecay), tlc::kWeightDecayRange},
                             Bound{beta1, tlc::isValidBeta(beta1), tlc::kBetaRange},
                             Bound{beta2, tlc::isValidBeta(beta2), tlc::kBetaRange},
                             Bound{adamEps, tlc::isValidPositive(adamEps), tlc::kPositiveRange},
                             Bound{clipGradNorm, tlc::isValidWeightDecay(clipGradNorm),
                                   "0 (off) or a positive normal f32"}})
    if (!bound.valid)
      return fmt::format("--{}={} must be {}", bound.option.ArgStr.str(), bound.option.getValue(), bound.range);
  std::vector<tlc::cli::Ranged> ranged = {{nproc, nproc, {1, 1024}}, {distTimeout, distTimeout, {1, 86'400}}};
  if (std::string problem = tlc::cli::firstOutOfRange(ranged); !problem.empty()) return problem;
  if (!(bucketMib > 0) || !std::isfinite(bucketMib) || bucketMib > 1 << 20)
    return fmt::format("--bucket-mib={} must be a positive number of MiB, at most 1048576", bucketMib.getValue());
  if (emit != Emit::None) {
    // It writes the training step and trains nothing: what only training reads is refused.
    const cl::Option *trainingOnly[] = {&numSteps,     &dataPath, &saveWeightsPath, &saveGradientsPath,
                                        &weightsPath,  &seed,     &target,          &threads,
                                        &noCache,      &graph,    &rendezvousDir,   &distTimeout,
                                        &overlapAllReduce};
    for (const cl::Option *option : trainingOnly)
      if (option->getNumOccurrences())
        return fmt::format("--{} does not apply to tlc train --emit (it writes the training step and trains nothing)",
                           option->ArgStr.str());
  }
  return "";
}

// tlc generate's own flags: the prompt sets the shape.
std::string checkGenerateFlags() {
  int prompts = promptText.getNumOccurrences() + promptIds.getNumOccurrences() + promptsPath.getNumOccurrences();
  if (prompts == 0)
    return "tlc generate needs --prompt \"text\", --prompt-ids (the prompt's token ids, e.g. --prompt-ids=\"1 2 3\") "
           "or --prompts FILE";
  if (prompts > 1) return "give one of --prompt, --prompt-ids and --prompts";
  for (int64_t id : stopTokens)
    if (std::string problem = tlc::outOfRange("--stop-token", id, {0, std::numeric_limits<int32_t>::max()});
        !problem.empty())
      return problem;
  const cl::Option *notHere[] = {&batchSize, &seqLen, &iterations, &tokensPath, &persistent, &saveWeightsPath,
                                 &matmulPrecision, &precompile};
  for (const cl::Option *option : notHere)
    if (option->getNumOccurrences())
      return fmt::format("--{} does not apply to tlc generate (the prompt sets the shape)",
                         option->ArgStr.str());
  if (emit != Emit::None && emit != Emit::IR && emit != Emit::Hip)
    return "tlc generate --emit writes the IR (--emit=ir) or the kernels of @prefill and @decode (--emit=hip -o dir/)";
  if (maxNewTokens < 1) return fmt::format("--max-new-tokens={} must be 1 or more", maxNewTokens.getValue());
  if (!(temperature >= 0) || !std::isfinite(temperature))
    return fmt::format("--temperature={} must be 0 (greedy) or positive", temperature.getValue());
  if (topK < 0) return fmt::format("--top-k={} must be 0 (all) or positive", topK.getValue());
  if (!(topP > 0 && topP <= 1)) return fmt::format("--top-p={} must be in (0, 1]", topP.getValue());
  if (maxContext < 0) return fmt::format("--max-context={} must be 0 (the model's) or positive", maxContext.getValue());
  const cl::Option *sampling[] = {&topK, &topP};
  for (const cl::Option *option : sampling)
    if (option->getNumOccurrences() && temperature == 0)
      return fmt::format("--{} needs --temperature above 0 (temperature 0 is greedy)", option->ArgStr.str());
  return "";
}

// What -o names: nothing ("-": stdout), a file, or a directory (tlc report, --emit=hip;
// --emit=program with a directory or a path ending in '/', written as dir/program.json).
tlc::FilePath emittedOutput() {
  if (reportCommand) return {"-o", outputPath == "-" ? "" : outputPath.getValue(), true};
  Emit what = emit == Emit::None && !run && outputPath != "-" ? Emit::Program : emit;
  if (what == Emit::None) return {"-o", "", false};
  bool directory = what == Emit::Hip || (what == Emit::Program && outputPath != "-" &&
                                         (llvm::sys::fs::is_directory(outputPath) ||
                                          llvm::StringRef(outputPath).ends_with("/")));
  return {"-o", outputPath, directory};
}

// The inputs can be read (regular files, opened without blocking) and the outputs
// written, none the same file as another, before any work is done.
std::string checkPaths() {
  std::vector<tlc::FilePath> inputs = {
      {"(the model)", inputFile}, {"--weights", weightsPath}, {"--tokens", tokensPath}, {"--data", dataPath},
      {"--prompts", promptsPath}};
  const char *what[] = {"model file", "weights file", "token file", "token file", "prompts file"};
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].path.empty() && inputs[i].path != "-")
      if (std::string problem = tlc::inputFileProblem(inputs[i].path); !problem.empty())
        return fmt::format("cannot open {} '{}': {}", what[i], inputs[i].path, problem);
  std::vector<tlc::FilePath> outputs = {emittedOutput(),
                                        {"--save-weights", saveWeightsPath},
                                        {"--save-gradients", saveGradientsPath},
                                        {"--save-logits", saveLogitsPath},
                                        {"--trace", tracePath},
                                        {"--stats-csv", statsCsvPath},
                                        {"--chart", chartPath},
                                        {"--dump-ir-dir", dumpIrDir, true}};
  return tlc::checkOutputPaths(outputs, inputs);
}

// The GPU a run goes to, once its backend is made: what the kernels are tuned for.
std::optional<tlc::DeviceInfo> runDevice;

// tlc train: this process among the ranks (from torchrun's, Slurm's or Open MPI's
// variables), and once they have met, the group they form.
tlc::RankPlace rankPlace;
std::shared_ptr<tlc::Communicator> trainingRanks;

// The ranks a training step is compiled for: the run's, or --nproc's (with --emit).
int trainingWorldSize() { return rankPlace.worldSize > 1 ? rankPlace.worldSize : int(nproc); }

tlc::ScheduleOverrides scheduleOverrides() {
  tlc::ScheduleOverrides overrides;
  overrides.gemmTile = gemmTile;
  overrides.wgmmaTile = wgmmaTile;
  overrides.attentionTile = attentionTile;
  overrides.attentionGradRows = attentionGradRows;
  overrides.noWgmma = noWgmma;
  overrides.noGemv = noGemv;
  overrides.noWeightRing = noWeightRing;
  overrides.noClusters = noClusters;
  overrides.dependentsAtStart = dependentsAtStart;
  overrides.gemvDependentsAtEnd = gemvDependentsAtEnd;
  overrides.chainTensorCoreGemvs = chainTensorCoreGemvs;
  overrides.workersPerSM = workersPerSM;
  overrides.gemvSplits = gemvSplits;
  overrides.gemvColumns = gemvColumns;
  overrides.gemvWarps = gemvWarps;
  overrides.gemvChainColumns = gemvChainColumns;
  overrides.gemvTensorCores = gemvTensorCores;
  overrides.cacheAttentionFma = cacheAttentionFma;
  overrides.cacheAttentionSplitKeys = cacheAttentionSplitKeys;
  overrides.chainCacheAttention = chainCacheAttention;
  return overrides;
}

// The level, shape and dtype the flags ask for (--seq-len fitted to the model first),
// tuned for --target-arch or the GPU the run goes to.
tlc::CompileOptions compileOptions() {
  tlc::CompileOptions options{optLevel, batchSize, seqLen, dtype, {}, matmulPrecision};
  if (fuseNormGrad.getNumOccurrences()) options.fuseNormGrad = fuseNormGrad;  // (=true below -O2 is refused)
  options.targetArch = targetArch;
  options.overrides = scheduleOverrides();
  options.persistent = persistent;
  options.gemvChains = gemvChains;
  if (trainCommand && trainingWorldSize() > 1) options.allReduceBucketMib = bucketMib;
  if (runDevice) tlc::tuneForDevice(options, *runDevice);
  return options;
}

tlc::AdamWOptions adamwOptions() {
  return {learningRate, beta1, beta2, adamEps, weightDecay, clipGradNorm};
}

// Flags that need another flag, or a valid value, said before any work is done.
std::string checkFlags() {
  if (inputFile.empty() == checkpointDir.empty())
    return inputFile.empty() ? "give a model: a .tl file, or --checkpoint DIR (a Hugging Face checkpoint's directory)"
                             : "give a .tl file or --checkpoint, not both";
  if (!checkpointDir.empty() && weightsPath.getNumOccurrences())
    return "--weights does not apply with --checkpoint: the weights are the checkpoint's safetensors";
  if (optLevel < 0 || optLevel > tlc::kMaxOptLevel)
    return fmt::format("-O{0} (--opt-level={0}): the levels are -O0 to -O{1}", optLevel, tlc::kMaxOptLevel);
  if (dtype != "f32" && dtype != "bf16") return fmt::format("unknown --dtype '{}': use f32 or bf16", dtype.getValue());
  if (matmulPrecision.getNumOccurrences() && dtype != "f32")
    return fmt::format("--matmul-precision applies to f32 models; --dtype={} multiplies {}", dtype.getValue(),
                       dtype.getValue());
  if (remarks.getNumOccurrences() && !remarks.empty() && remarks != "fused" && remarks != "missed")
    return fmt::format("unknown --remarks={}: use --remarks (both), --remarks=fused or --remarks=missed",
                       remarks.getValue());
  std::vector<tlc::cli::Ranged> ranged = {
      {batchSize, batchSize, {1, tlc::kMaxTokens}}, {seqLen, seqLen, {1, tlc::kMaxTokens}},
      {iterations, iterations, tlc::kIterationsRange}, {threads, threads, tlc::kThreadsRange},
      {irBlock, irBlock, {0, std::numeric_limits<int>::max()}}, {numSteps, numSteps, {1, 1'000'000'000}}};
  if (std::string problem = tlc::cli::firstOutOfRange(ranged); !problem.empty()) return problem;
  if (std::optional<int64_t> tokens = tlc::checkedMul(batchSize, seqLen); !tokens || *tokens > tlc::kMaxTokens)
    return fmt::format("--batch-size={} x --seq-len={} is more than the {} tokens a forward may take",
                       batchSize.getValue(), seqLen.getValue(), tlc::kMaxTokens);
  if (target != "auto" && target != "cpu" && target != "cuda" && target != "hip")
    return fmt::format("unknown --target '{}': use auto, cuda, hip or cpu", target.getValue());
  if (std::string problem = tlc::outOfRange("--persistent-timeout", persistentTimeout, tlc::kPersistentTimeoutRange);
      !problem.empty())
    return problem;
  if (trainCommand) {
    if (std::string problem = checkTrainFlags(); !problem.empty()) return problem;
  }
  if (generateCommand) {
    if (std::string problem = checkGenerateFlags(); !problem.empty()) return problem;
  }
  if (ladderCommand || reportCommand) {
    // LLVM's parser lets a subcommand take the top level's options too; these mean
    // nothing to the ladder, so they are refused rather than ignored.
    const cl::Option *runOnly[] = {
        &optLevelShort, &optLevelLong, &emit, &outputPath, &printKernels, &printIrAfterAll, &printIrBeforeAll,
             &static_cast<cl::Option &>(printIrAfter), &printIrAfterChange, &dumpIrDir, &irBlock, &run, &saveWeightsPath, &saveLogitsPath, &profile, &tracePath,
             &statsCsvPath};
    const char *command = ladderCommand ? "ladder" : "report";
    for (const cl::Option *option : runOnly)
      if (option->getNumOccurrences() && !(reportCommand && option == &outputPath))
        return fmt::format("--{} does not apply to tlc {} (it runs every level; see tlc {} --help)",
                           option->ArgStr.str(), command, command);
    if (reportCommand && outputPath == "-") return "tlc report writes a directory: give -o dir/";
  }
  auto runs = [] { return run || ladderCommand || trainCommand || generateCommand || reportCommand; };
  std::vector<tlc::cli::Requirement> requirements = {
      {profile, [] { return run || trainCommand; }, "--profile needs --run (or tlc train)"},
      {tracePath, [] { return bool(profile); }, "--trace needs --profile (and --run, or tlc train)"},
      {statsCsvPath, [] { return bool(profile); }, "--stats-csv needs --profile (and --run)"},
      {iterations, runs, "--iterations needs --run"},
      {seed, runs, "--seed needs --run"},
      {weightsPath, runs, "--weights needs --run"},
      {saveWeightsPath, runs, "--save-weights needs --run"},
      {saveLogitsPath, [] { return bool(run); }, "--save-logits needs --run"},
      {tokensPath, runs, "--tokens needs --run"},
      {target, runs, "--target needs --run"},
      {threads, runs, "--cpu-threads needs --run"},
      {noCache, runs, "--no-cache needs --run"},
      {graph, runs, "--graph needs --run"},
      {allowNonFinite, runs, "--allow-nonfinite needs --run"},
      {printIrAfterChange, wantsIrPrinting,
       "--print-ir-after-change needs --print-ir-after-all, --print-ir-after=<pass> or --dump-ir-dir"},
      {irBlock, [] { return wantsIrPrinting() || emit == Emit::IR || emit == Emit::Schedule; },
       "--ir-block needs --emit=ir, --emit=schedule, a --print-ir-* flag or --dump-ir-dir"},
  };
  if (std::string unmet = tlc::cli::firstUnmet(requirements); !unmet.empty()) return unmet;
  if (outputPath.getNumOccurrences() && run && emit == Emit::None)
    return "-o needs --emit=ir, program or hip (--run writes nothing to it)";
  return checkPaths();
}

// The model's tl.max_seq_len bounds --seq-len, and its default.
void fitDefaultSeqLen(mlir::ModuleOp module) {
  auto maxSeq = module->getAttrOfType<mlir::IntegerAttr>("tl.max_seq_len");
  // tlc generate's is the prompt's length: never cut.
  if (maxSeq && seqLen.getNumOccurrences() == 0 && !generateCommand && seqLen > maxSeq.getInt())
    seqLen = maxSeq.getInt();
}

// Checks of flags against the parsed model, still before any pass runs.
std::string checkFlagsAgainst(mlir::ModuleOp module, const tlc::CompileOptions &options) {
  auto maxSeq = module->getAttrOfType<mlir::IntegerAttr>("tl.max_seq_len");
  if (maxSeq && seqLen > maxSeq.getInt())
    return fmt::format("{} the model's maximum of {} ({} in {})",
                       generateCommand ? fmt::format("{}: {} tokens exceed", promptFlag(), seqLen.getValue())
                                       : fmt::format("--seq-len={} exceeds", seqLen.getValue()),
                       maxSeq.getInt(), checkpointDir.empty() ? "tl.max_seq_len" : "max_position_embeddings",
                       modelName());
  if (irBlock >= 0) {
    int blocks = tlc::countBlocks(module);
    if (irBlock >= blocks)
      return fmt::format("--ir-block={}: {} has {} transformer block{}{}", irBlock.getValue(), modelName(),
                         blocks, blocks == 1 ? "" : "s", blocks ? fmt::format(" (0..{})", blocks - 1) : "");
  }
  if (!printIrAfter.empty()) {
    tlc::AdamWOptions adamw = adamwOptions();
    tlc::GenerationOptions generation{maxContext};
    std::vector<std::string> passes = tlc::pipelinePasses(options, trainCommand ? &adamw : nullptr,
                                                          generateCommand ? &generation : nullptr);
    for (const std::string &name : printIrAfter)
      if (std::find(passes.begin(), passes.end(), name) == passes.end())
        return fmt::format("--print-ir-after={}: no pass of that name runs at -O{} (it runs: {})", name, optLevel,
                           fmt::join(std::set<std::string>(passes.begin(), passes.end()), ", "));
  }
  if (!targetArch.empty()) {
    try {
      tlc::findTarget(targetArch);
    } catch (const tlc::Error &error) {
      return fmt::format("--target-arch: {}", error.what());
    }
  }
  if (persistent && trainCommand)
    return "--persistent applies to a forward: a training step keeps O2's launches";
  if (persistent && optLevel < 3 && !ladderCommand && !reportCommand)
    return fmt::format("--persistent needs -O3 (the level that fuses the whole forward), not -O{}", optLevel);
  if (gemvChains && (optLevel < 3 || persistent || trainCommand) && !ladderCommand && !reportCommand)
    return "--gemv-chains applies to -O3's chained launches of a forward or generation (not --persistent, not training)";
  if (std::string problem = tlc::scheduleOverridesError(scheduleOverrides()); !problem.empty()) return problem;
  if (!dumpIrDir.empty()) {
    if (std::error_code error = llvm::sys::fs::create_directories(dumpIrDir))
      return fmt::format("--dump-ir-dir: cannot create '{}': {}", dumpIrDir.getValue(), error.message());
  }
  return "";
}

// Shows the pass running now on the progress line.
struct PassProgress : mlir::PassInstrumentation {
  explicit PassProgress(tlc::ProgressLine &line) : line(line) {}
  void runBeforePass(mlir::Pass *pass, mlir::Operation *) override { line.setDetail(pass->getArgument().str()); }
  tlc::ProgressLine &line;
};

// MLIR's --mlir-print-ir-after-change is a pass-manager option with no accessor;
// tlc's own printing honours it too.
bool mlirAfterChange() {
  auto &options = cl::getRegisteredOptions();
  auto found = options.find("mlir-print-ir-after-change");
  return found != options.end() && found->second->getNumOccurrences() > 0;
}

// Set by the IR dumps when a file could not be written: the command then fails.
std::shared_ptr<bool> dumpFailed = std::make_shared<bool>(false);

void configurePassManager(mlir::PassManager &pm, tlc::ProgressLine &line) {
  if (mlir::failed(mlir::applyPassManagerCLOptions(pm))) return;
  mlir::applyDefaultTimingPassManagerCLOptions(pm);
  pm.addInstrumentation(std::make_unique<PassProgress>(line));
  if (!wantsIrPrinting()) return;
  tlc::IrDumpOptions dumps;
  dumps.beforeAll = printIrBeforeAll;
  dumps.afterAll = printIrAfterAll;
  dumps.after.insert(printIrAfter.begin(), printIrAfter.end());
  dumps.onlyOnChange = printIrAfterChange || mlirAfterChange();
  dumps.directory = dumpIrDir;
  dumps.block = irBlock;
  dumps.failed = dumpFailed;
  pm.getContext()->disableMultithreading();  // the whole module is printed
  pm.enableIRPrinting(tlc::createIrDumpConfig(dumps));
}

tlc::BackendOptions backendOptions() {
  tlc::BackendOptions options;
  options.target = target;
  options.cpuThreads = threads;
  options.cpuSchedule = {cpuSchedule, seed};
  options.useCache = !noCache;
  options.graph = graph;
  options.profile = profile;
  options.progress = false;  // tlc's own progress lines cover loading
  options.persistentTimeoutSeconds = persistentTimeout;
  options.debugPersistentCycle = debugPersistentCycle;
  return options;
}

tlc::RunInputs runInputs() {
  tlc::RunInputs inputs;
  inputs.weightsPath = weightsPath;
  inputs.checkpointDir = checkpointDir;
  inputs.tokensPath = tokensPath;
  inputs.seed = seed;
  inputs.threads = threads;
  return inputs;
}

void printKernelTable(const tlc::Program &program) {
  fmt::print("{:>4}  {:<64} {:>5} {:>10} {:>10}\n", "#", "kernel", "block", "MFLOP", "KiB moved");
  std::vector<const tlc::Kernel *> kernels = tlc::computeKernels(program);  // a persistent kernel's parts
  for (size_t i = 0; i < kernels.size(); ++i) {
    const tlc::Kernel &k = *kernels[i];
    fmt::print("{:>4}  {:<64} {:>5} {:>10.2f} {:>10.1f}\n", i, k.name,
               k.layer < 0 ? std::string("-") : std::to_string(k.layer), double(k.flops) / 1e6,
               double(k.minBytes) / 1024);
  }
  fmt::print("{}", tlc::kernelCountLines(program));
}

// NumPy's .npy format, version 1.0: magic, a header dict padded to 64 bytes, raw data.
void saveNpy(const std::string &path, const tlc::Tensor &tensor) {
  std::string shape;
  for (int64_t dim : tensor.shape) shape += std::to_string(dim) + ", ";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  tlc::OutputFile file(path, ".npy file");
  uint16_t length = uint16_t(header.size());
  file.write("\x93NUMPY\x01\x00", 8);
  file.write(&length, 2);
  file.write(header);
  file.write(tensor.data.data(), tensor.data.size() * 4);
  file.commit();
}

// --profile compiles a persistent kernel with its tasks' stamps (TL_TRACE); what they cost
// is the same forward on a second backend compiled without them, launched as the profiled
// one is (directly, not from a graph). Where that backend cannot be made or loaded (a
// second copy of the weights that does not fit, say), the line says so instead.
std::string tracingCost(const tlc::Program &program, const tlc::Weights &weights, const std::vector<int32_t> &tokens,
                        double tracedMs) {
  tlc::BackendOptions plain = backendOptions();
  plain.profile = false;
  plain.graph = false;
  try {
    std::unique_ptr<tlc::Backend> untraced = tlc::createBackend(plain);
    untraced->load(program, weights);
    const double ms = tlc::timeForward(*untraced, tokens, std::max(10, iterations.getValue())).result.milliseconds;
    return fmt::format("tracing: the forward {:.3f} ms with the tasks' stamps, {:.3f} ms without them ({:+.1f} %)\n",
                       tracedMs, ms, 100.0 * (tracedMs / ms - 1.0));
  } catch (const tlc::Error &error) {
    return fmt::format("tracing: its cost not measured ({})\n", error.what());
  }
}

int runForward(const tlc::Program &program, tlc::Backend &backend) {
  tlc::RunInputs inputs = runInputs();
  tlc::Weights weights = tlc::loadWeights(inputs, program);
  std::vector<int32_t> tokens = tlc::loadTokens(inputs, program);
  if (!saveWeightsPath.empty()) {
    tlc::ProgressLine line("saving the weights");
    weights.saveSafetensors(saveWeightsPath);
  }
  {
    tlc::ProgressLine line(fmt::format("loading onto {} (weights{})", backend.name(),
                                       backend.name() == "cpu" ? "" : ", JIT"));
    backend.load(program, weights);
  }
  const tlc::GpuReport *gpu = tlc::gpuReport(backend);
  tlc::Profiler profiler(program, gpu ? gpu->device : "cpu");
  tlc::TimedForward timed;
  {
    tlc::ProgressLine line(iterations > 1 ? fmt::format("timing {} forwards", iterations.getValue())
                                          : std::string("running the forward"));
    timed = tlc::timeForward(backend, tokens, iterations, profile ? &profiler : nullptr);
  }
  if (allowNonFinite) {
    if (std::string problem = tlc::nonFiniteResults(program, timed.result); !problem.empty())
      llvm::WithColor::warning(llvm::errs(), "tlc") << problem << "\n";
  } else {
    tlc::checkFiniteForward(program, timed.result, weights, tokens, threads);
  }
  if (!saveLogitsPath.empty()) saveNpy(saveLogitsPath, timed.result.logits);
  tlc::RunSummary summary("tlc", program, backend, timed, inputs);
  summary.profiled = profile;
  summary.graph = graph;
  fmt::print("{}", tlc::formatRunSummary(summary));
  if (profile) {
    fmt::print("\n{}", profiler.table());
    if (std::string tasks = profiler.taskTable(); !tasks.empty()) {
      fmt::print("\n{}", tasks);
      if (gpu) fmt::print("{}", tracingCost(program, weights, tokens, timed.result.milliseconds));
    }
    if (std::string timeline = profiler.layerTimeline(); !timeline.empty()) fmt::print("\n{}", timeline);
    if (!tracePath.empty()) tlc::writeFileAtomically(tracePath, profiler.chromeTrace(), "trace");
    if (!statsCsvPath.empty()) tlc::writeFileAtomically(statsCsvPath, profiler.statsCsv(), "CSV file");
  }
  return 0;
}

int writeProgram(const tlc::Program &program);
int precompileKernels(const tlc::Program &program);

// --emit=ir: the module after the pipeline (a forward's or a training step's).
void writeIr(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  tlc::printIr(module, irBlock, os);
  tlc::writeFileAtomically(outputPath, text, "IR");
}

int emitOutputs(mlir::ModuleOp module, const tlc::CompileOptions &options, tlc::Backend *backend) {
  if (emit == Emit::IR) writeIr(module);
  if (emit == Emit::None && !run && outputPath != "-")  // `-o dir/` alone writes the Program
    emit = Emit::Program;
  if (emit != Emit::Program && emit != Emit::Hip && emit != Emit::Schedule && !run && !printKernels && !precompile)
    return 0;

  mlir::FailureOr<tlc::Program> program = mlir::failure();
  {
    tlc::ProgressLine line("lowering to a Program (kernels, memory plan, GPU sources)");
    program = tlc::buildProgram(module, options);
  }
  if (mlir::failed(program)) return 1;
  if (int failed = writeProgram(*program)) return failed;
  if (printKernels) printKernelTable(*program);
  if (precompile) return precompileKernels(*program);
  if (run) return runForward(*program, *backend);
  return 0;
}

// --precompile: every distinct kernel source (a persistent kernel's, and its parts' for
// devices that run them instead) through the target's run-time compiler into the cache.
int precompileKernels(const tlc::Program &program) {
  const tlc::TargetDesc &target = tlc::findTarget(program.targetArch);
  auto compiler = target.vendor == tlc::Vendor::NVIDIA ? tlc::createNvrtcCompiler() : tlc::createHiprtcCompiler();
  std::vector<tlc::JitSource> sources;
  for (const tlc::Kernel &kernel : program.kernels) {
    sources.push_back({kernel.entry, kernel.source});
    for (const tlc::Kernel &part : kernel.parts) sources.push_back({part.entry, part.source});
  }
  tlc::JitOptions options;
  options.arch = target.jitArch;
  options.progress = progress != tlc::ProgressMode::Never;
  tlc::JitStats stats;
  tlc::jitCompileAll(*compiler, sources, options, &stats);
  // A persistent kernel also as profiling compiles it, its tasks stamped.
  std::vector<tlc::JitSource> traced;
  for (const tlc::Kernel &kernel : program.kernels)
    if (!kernel.parts.empty()) traced.push_back({kernel.entry, kernel.source});
  if (!traced.empty()) {
    options.compilerOptions.push_back("-DTL_TRACE=1");
    tlc::JitStats tracedStats;
    tlc::jitCompileAll(*compiler, traced, options, &tracedStats);
    stats.compiled += tracedStats.compiled;
    stats.cached += tracedStats.cached;
    stats.seconds += tracedStats.seconds;
  }
  fmt::print("tlc: {} kernels for {} in the cache ({}: {} compiled, {} there already, {:.1f} s)\n",
             stats.compiled + stats.cached, target.jitArch, tlc::jitCacheDir(), stats.compiled, stats.cached,
             stats.seconds);
  return 0;
}

// --emit=program, hip or schedule of a built Program (a forward or a training step).
int writeProgram(const tlc::Program &program) {
  if (emit == Emit::Schedule) {
    std::string schedule = tlc::codegen::describeSchedule(program, irBlock);
    if (schedule.empty())
      return fail(fmt::format("--emit=schedule: -O{} runs no persistent kernel{}", program.optLevel,
                              program.persistentFallback.empty() ? " (O3's forward does)"
                                                                 : ": " + program.persistentFallback));
    tlc::writeFileAtomically(outputPath, schedule, "schedule");
    return 0;
  }
  if (emit == Emit::Hip) {
    if (outputPath == "-") return fail("--emit=hip writes a directory: give -o dir/");
    if (std::error_code error = llvm::sys::fs::create_directories(outputPath))
      return fail(fmt::format("cannot create '{}': {}", outputPath.getValue(), error.message()));
    int files = tlc::writeHipSources(program, outputPath);
    tlc::writeFileAtomically(outputPath + "/program.json", tlc::programToJson(program), "program file");
    fmt::print(stderr, "tlc: wrote {} kernel sources and program.json to {}\n", files, outputPath.getValue());
  }
  if (emit == Emit::Program) {
    std::string path = outputPath;
    if (path != "-" && (llvm::sys::fs::is_directory(path) || llvm::StringRef(path).ends_with("/"))) {
      if (std::error_code error = llvm::sys::fs::create_directories(path))
        return fail(fmt::format("cannot create '{}': {}", path, error.message()));
      path += "/program.json";
    }
    tlc::writeFileAtomically(path, tlc::programToJson(program), "program file");
  }
  return 0;
}

// The checkpoint's config.json, read once; the fields tlc passes over are said once.
const tlc::HfConfig &checkpointConfig() {
  static std::optional<tlc::HfConfig> config;
  if (!config) {
    config = tlc::readHfConfig(checkpointDir);
    if (!config->unknown.empty())
      llvm::WithColor::warning(llvm::errs(), "tlc")
          << fmt::format("{}/config.json: tlc does not read {}, taken not to change the model\n",
                         checkpointDir.getValue(), fmt::join(config->unknown, ", "));
  }
  return *config;
}

// The model as messages name it: the .tl file, or the checkpoint's config.json.
std::string modelName() { return checkpointDir.empty() ? inputFile.getValue() : checkpointDir + "/config.json"; }

std::string promptFlag() {
  return promptIds.getNumOccurrences() ? "--prompt-ids" : promptsPath.getNumOccurrences() ? "--prompts" : "--prompt";
}

// An option's value if it was given (even empty), else nothing.
std::optional<std::string> given(const cl::opt<std::string> &option) {
  return option.getNumOccurrences() ? std::optional<std::string>(option.getValue()) : std::nullopt;
}

// The model: a .tl file parsed, or a checkpoint's graph built from its config.json.
mlir::OwningOpRef<mlir::ModuleOp> parseModel(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr) {
  if (checkpointDir.empty()) return tlc::parseModelFile(context, inputFile, sourceMgr);
  return tlc::buildCheckpointModule(context, checkpointConfig(), checkpointDir, sourceMgr);
}

// Parses the model, checks the flags against it and runs the level's passes (with
// `training`, then tl-autodiff; with `generation`, after tl-kv-cache): null once an error
// has been said.
mlir::OwningOpRef<mlir::ModuleOp> parseAndOptimize(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr,
                                                   const tlc::AdamWOptions *training,
                                                   const tlc::GenerationOptions *generation = nullptr) {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  {
    tlc::ProgressLine line(fmt::format("parsing {}", modelName()));
    module = parseModel(context, sourceMgr);
  }
  if (!module) return nullptr;
  fitDefaultSeqLen(*module);
  if (std::string problem = checkFlagsAgainst(*module, compileOptions()); !problem.empty()) {
    fail(problem);
    return nullptr;
  }
  tlc::ProgressLine line(fmt::format(training     ? "building the training step at -O{}"
                                     : generation ? "building @prefill and @decode at -O{}"
                                                  : "optimizing at -O{}",
                                     optLevel));
  if (mlir::failed(tlc::optimizeModule(
          *module, compileOptions(), [&](mlir::PassManager &pm) { configurePassManager(pm, line); }, training,
          generation)) ||
      *dumpFailed)
    return nullptr;
  return module;
}

int compileAndRun(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr) {
  // The device first: a missing GPU is said before any compiling.
  std::unique_ptr<tlc::Backend> backend = run ? tlc::createBackend(backendOptions()) : nullptr;
  if (backend) runDevice = backend->deviceInfo();
  mlir::OwningOpRef<mlir::ModuleOp> module = parseAndOptimize(context, sourceMgr, nullptr);
  if (!module) return 1;
  return emitOutputs(*module, compileOptions(), backend.get());
}

// tlc train: the training step built at the level (its IR printable as any level's),
// then the workshop's loop on the chosen backend; with --emit, its IR, Program or
// kernels instead.
// A rank of several: meets the others, then takes its GPU (LOCAL_RANK) or its share of
// this machine's cores.
std::unique_ptr<tlc::Backend> createRankBackend() {
  tlc::BackendOptions options = backendOptions();
  if (rankPlace.worldSize < 2) return tlc::createBackend(options);
  tlc::RendezvousOptions rendezvous{rankPlace, rendezvousDir, std::chrono::seconds(distTimeout)};
  {
    tlc::ProgressLine line(fmt::format("rank {} of {}: meeting the others", rankPlace.rank, rankPlace.worldSize));
    trainingRanks = tlc::joinRanks(rendezvous);
  }
  options.device = rankPlace.localRank;
  if (!threads.getNumOccurrences() && rankPlace.localWorldSize > 1)
    options.cpuThreads = std::max(1, int(std::thread::hardware_concurrency()) / rankPlace.localWorldSize);
  return tlc::createBackend(options, trainingRanks, overlapAllReduce);
}

int trainModel(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr) {
  rankPlace = tlc::rankPlaceFromEnvironment();
  if (nproc > 1 && emit == Emit::None) {
    if (rankPlace.worldSize > 1)
      return fail(fmt::format("--nproc={} starts ranks, but this process is already rank {} of {} ({} set its "
                              "variables): leave --nproc out under a launcher",
                              nproc.getValue(), rankPlace.rank, rankPlace.worldSize, rankPlace.launcher));
    return tlc::launchRanks(tlc::withoutNproc(commandLine.argc, commandLine.argv), nproc);
  }
  // The device first (a missing GPU is said before any compiling), unless only emitting.
  std::unique_ptr<tlc::Backend> backend = emit == Emit::None ? createRankBackend() : nullptr;
  if (backend) runDevice = backend->deviceInfo();
  tlc::AdamWOptions adamw = adamwOptions();
  mlir::OwningOpRef<mlir::ModuleOp> module = parseAndOptimize(context, sourceMgr, &adamw);
  if (!module) return 1;
  if (emit == Emit::IR) {  // the training step's IR, no training
    writeIr(*module);
    return 0;
  }
  mlir::FailureOr<tlc::Program> program = mlir::failure();
  {
    tlc::ProgressLine line("lowering the training step to a Program (kernels, memory plan)");
    program = tlc::buildProgram(*module, compileOptions(), &adamw);
  }
  if (mlir::failed(program)) return 1;
  if (emit != Emit::None) return writeProgram(*program);  // the training step's kernels, no training
  tlc::TrainingRun training;
  training.steps = numSteps;
  training.inputs = runInputs();
  training.dataPath = dataPath;
  training.adamw = adamw;
  training.saveWeightsPath = saveWeightsPath;
  training.saveGradientsPath = saveGradientsPath;
  training.progressBar = progress != tlc::ProgressMode::Never && ::isatty(::fileno(stderr));
  training.profile = profile;
  training.tracePath = tracePath;
  training.ranks = trainingRanks;
  training.launcher = rankPlace.launcher == "torchrun" ? "RANK, WORLD_SIZE as torchrun and tlc train --nproc set them"
                                                       : rankPlace.launcher + "'s variables";
  tlc::train(*program, *backend, training);
  return 0;
}

// tlc generate --emit=hip: each Program's kernel sources and program.json in dir/prefill/
// and dir/decode/.
int writeGenerationSources(const tlc::GenerationPrograms &programs) {
  if (outputPath == "-") return fail("--emit=hip writes a directory: give -o dir/");
  for (auto [name, program] : {std::pair<const char *, const tlc::Program *>{"prefill", &programs.prefill},
                               {"decode", &programs.decode}}) {
    std::string directory = outputPath + "/" + name;
    if (std::error_code error = llvm::sys::fs::create_directories(directory))
      return fail(fmt::format("cannot create '{}': {}", directory, error.message()));
    int files = tlc::writeHipSources(*program, directory);
    tlc::writeFileAtomically(directory + "/program.json", tlc::programToJson(*program), "program file");
    fmt::print(stderr, "tlc: wrote {} kernel sources and program.json to {}\n", files, directory);
  }
  return 0;
}

// tlc generate: @prefill and @decode built at the level (their IR printable as any
// level's), then the prompt continued on the chosen backend; with --emit=ir or hip, their
// IR or kernels instead.
int generateTokens(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr) {
  // The device first (a missing GPU is said before any compiling), unless only emitting.
  if (emit == Emit::None) runDevice = tlc::createBackend(backendOptions())->deviceInfo();
  tlc::GenerationRun generation;
  tlc::PromptFlags flags{given(promptText), given(promptIds), given(promptsPath), tokenizerPath,
                         {stopTokens.begin(), stopTokens.end()}, ignoreEos};
  generation.prompts = tlc::readPrompts(flags, checkpointDir, checkpointDir.empty() ? nullptr : &checkpointConfig());
  // The prompts are the shape: a sequence each, the longest the prefill's length.
  batchSize = int64_t(generation.prompts.ids.size());
  seqLen = 0;
  for (const std::vector<int32_t> &ids : generation.prompts.ids) seqLen = std::max<int64_t>(seqLen, int64_t(ids.size()));
  tlc::GenerationOptions options{maxContext};
  mlir::OwningOpRef<mlir::ModuleOp> module = parseAndOptimize(context, sourceMgr, nullptr, &options);
  if (!module) return 1;
  if (emit == Emit::IR) {
    writeIr(*module);
    return 0;
  }
  mlir::FailureOr<tlc::GenerationPrograms> programs = mlir::failure();
  {
    tlc::ProgressLine line("lowering @prefill and @decode to Programs (kernels, memory plan)");
    programs = tlc::buildGenerationPrograms(*module, compileOptions(), options);
  }
  if (mlir::failed(programs)) return 1;
  if (emit == Emit::Hip) return writeGenerationSources(*programs);
  generation.maxNewTokens = maxNewTokens;
  generation.sampling = {temperature, topK, topP, seed};
  generation.inputs = runInputs();
  generation.backend = backendOptions();
  tlc::generate(*programs, generation);
  return 0;
}

// The model parsed for every level (ladder, report), its flags checked: null once an
// error has been said.
mlir::OwningOpRef<mlir::ModuleOp> parseForEveryLevel(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr) {
  auto module = parseModel(context, sourceMgr);
  if (!module) return nullptr;
  fitDefaultSeqLen(*module);
  if (std::string problem = checkFlagsAgainst(*module, {0, batchSize, seqLen, dtype}); !problem.empty()) {
    fail(problem);
    return nullptr;
  }
  return module;
}

tlc::LadderOptions ladderOptions() {
  tlc::LadderOptions options;
  options.batch = batchSize;
  options.seqLen = seqLen;
  options.dtype = dtype;
  options.targetArch = targetArch;
  options.overrides = scheduleOverrides();
  options.persistent = persistent;
  options.matmulPrecision = matmulPrecision;
  options.backend = backendOptions();
  options.inputs = runInputs();
  options.iterations = iterations.getNumOccurrences() ? int(iterations) : 3;
  options.allowNonFinite = allowNonFinite;
  return options;
}

int writeReport(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr) {
  auto start = std::chrono::steady_clock::now();
  auto module = parseForEveryLevel(context, sourceMgr);
  if (!module) return 1;
  mlir::FailureOr<tlc::ReportData> data = tlc::collectReport(*module, modelName(), ladderOptions());
  if (mlir::failed(data)) return 1;
  int64_t bytes = 0;
  {
    tlc::ProgressLine line("writing the report (laying out the graphs)");
    bytes = tlc::writeReportSite(*data, outputPath);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("tlc report: {}/index.html, {:.2f} MiB, made in {:.1f} s\n", outputPath.getValue(),
             double(bytes) / (1 << 20), seconds);
  return 0;
}

int climbLadder(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr) {
  auto module = parseForEveryLevel(context, sourceMgr);
  if (!module) return 1;
  tlc::LadderOptions options = ladderOptions();
  mlir::FailureOr<tlc::Ladder> ladder = tlc::climbLadder(*module, options);
  if (mlir::failed(ladder)) return 1;
  fmt::print("{}", tlc::ladderTable(*ladder));
  if (!chartPath.empty()) {
    tlc::writeFileAtomically(chartPath, tlc::ladderChartSvg(*ladder), "chart");
    fmt::print("\nchart: {}\n", chartPath.getValue());
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  commandLine = {argc, argv};  // before LLVM reads it: the ranks of --nproc get the same
  llvm::InitLLVM init(argc, argv);
  tlc::reportOversizedWrites();  // after LLVM's handlers, which would report SIGXFSZ as a crash
  tlc::cli::registerMlirOptions();
  tlc::registerTlcPasses();
  tlc::cli::setVersionPrinter("tlc");
  tlc::cli::showOnly({&compileCategory, &irCategory, &runCategory, &tlc::cli::passManagerCategory()});
  tlc::cli::showOnly({&compileCategory, &runCategory, &ladderCategory}, ladderCommand);
  tlc::cli::showOnly({&compileCategory, &irCategory, &runCategory, &trainCategory, &ranksCategory}, trainCommand);
  tlc::cli::showOnly({&compileCategory, &irCategory, &runCategory, &generateCategory}, generateCommand);
  tlc::cli::showOnly({&compileCategory, &runCategory}, reportCommand);
  cl::ParseCommandLineOptions(argc, argv,
                              "tlc: compile a transformer written in the tl dialect into fused kernels, show what "
                              "each pass did, and run it\n");
  tlc::configureProgress({progress, 1.0, stderr, "tlc"});
  if (std::string problem = checkFlags(); !problem.empty()) return fail(problem);

  mlir::DialectRegistry registry;
  tlc::registerTlcDialects(registry);
  mlir::MLIRContext context(registry);
  context.printOpOnDiagnostic(false);  // one located line, not the module behind it
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler located(sourceMgr, &context);
  // Registered last, so it sees diagnostics first: those with no place in a file
  // (a file that cannot be opened) read as tlc's own errors, not "<unknown>:0:".
  context.getDiagEngine().registerHandler([](mlir::Diagnostic &diagnostic) {
    if (diagnostic.getSeverity() == mlir::DiagnosticSeverity::Remark) {  // printed, located, only when asked for
      std::optional<tl::FusionRemark> remark = tl::parseFusionRemark(diagnostic);
      bool wanted = remark && remarks.getNumOccurrences() &&
                    (remarks.empty() || (remarks == "fused") == remark->fused);
      return mlir::success(!wanted);
    }
    if (!llvm::isa<mlir::UnknownLoc>(diagnostic.getLocation())) return mlir::failure();
    llvm::WithColor::error(llvm::errs(), "tlc") << diagnostic.str() << "\n";
    return mlir::success();
  });

  try {
    int status = trainCommand      ? trainModel(context, sourceMgr)
                 : generateCommand ? generateTokens(context, sourceMgr)
                 : reportCommand   ? writeReport(context, sourceMgr)
                 : ladderCommand   ? climbLadder(context, sourceMgr)
                                   : compileAndRun(context, sourceMgr);
    if (status != 0 && trainingRanks) tlc::announceFailure(*trainingRanks, "failed (its error is in its output)");
    tlc::checkStdout();  // a summary lost to a full disk or a closed pipe is a failure too
    return status;
  } catch (const tlc::Error &error) {
    if (trainingRanks) tlc::announceFailure(*trainingRanks, fmt::format("failed: {}", error.what()));
    return fail(error.what());
  } catch (const std::bad_alloc &) {  // a safety net: memory budgets refuse before allocating
    return fail("out of memory");
  } catch (const std::exception &error) {
    if (trainingRanks) tlc::announceFailure(*trainingRanks, fmt::format("failed: {}", error.what()));
    return fail(fmt::format("unexpected error: {}", error.what()));
  }
}
