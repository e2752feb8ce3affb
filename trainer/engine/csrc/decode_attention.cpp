// One decode step's attention, each row reading exactly its own cached keys: see trainer/engine/kernels.py.
//
// For row b and kv head h, with n = past_len[b] cached positions and the G query heads that share h:
//
//   out[b, h, g] = softmax([q·K[0..n) , q·k_new] * scale) @ [V[0..n) ; v_new]
//
// One task per (row, kv head): its keys and values are streamed once, for all G query heads, in position order (two
// passes: scores, then the weighted sum of values), and nothing past the row's own length is read — unlike a batched
// matmul over the cache, which reads every row up to the batch's longest and masks the rest. The tasks are split over
// `threads` threads by the keys they read (`run_split`).
//
// fp32 caches whose head_dim is 64, 128 or 256 take `FastKernel`, which works on blocks of 16 keys in 16-float vectors
// (GCC/Clang vector extensions: one AVX-512 register, two AVX2 ones, or whatever the target has); anything else (bf16,
// other head sizes) takes the plain loops of `plain_task`.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace {

// Reductions keep kLanes independent partial results, combined by halves at the end: a single running sum would chain
// every addition on the one before (no vectorising, a few cycles each), and a dot product is taken per cached key.
constexpr int64_t kLanes = 16;

inline float combine_sum(float* lanes) {
  for (int64_t width = kLanes / 2; width > 0; width /= 2) {
    for (int64_t l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

template <typename scalar_t>
inline float dot(const float* q, const scalar_t* k, int64_t dim) {
  float lanes[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += q[d + l] * static_cast<float>(k[d + l]);
  }
  for (int64_t l = 0; d < dim; ++d, ++l) lanes[l] += q[d] * static_cast<float>(k[d]);
  return combine_sum(lanes);
}

inline float max_of(const float* x, int64_t n) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, x[0]);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] = std::max(lanes[l], x[j + l]);
  }
  for (int64_t l = 0; j < n; ++j, ++l) lanes[l] = std::max(lanes[l], x[j]);
  for (int64_t width = kLanes / 2; width > 0; width /= 2) {
    for (int64_t l = 0; l < width; ++l) lanes[l] = std::max(lanes[l], lanes[l + width]);
  }
  return lanes[0];
}

inline float sum_of(const float* x, int64_t n) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += x[j + l];
  }
  for (int64_t l = 0; j < n; ++j, ++l) lanes[l] += x[j];
  return combine_sum(lanes);
}

// exp(x) for x <= 0 (a score minus its row's largest), as Cephes' expf: x = n·ln2 + r with |r| <= ln2/2 (ln2 split
// in two constants so n·ln2 is exact), exp(r) by Cephes' degree-7 polynomial, times 2^n written into the exponent bits;
// relative error ~1e-7. Branch-free, so the compiler vectorises the softmax loop; std::exp is a scalar libm call per
// score (it was half the kernel's time with two query heads per kv head).
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);  // exp(-87) ~ 1.6e-38, the smallest normal float's scale; anything below counts as that
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

inline void softmax_in_place(float* scores, int64_t n) {
  const float top = max_of(scores, n);
  for (int64_t j = 0; j < n; ++j) scores[j] = exp_nonpositive(scores[j] - top);
  const float inv_total = 1.f / sum_of(scores, n);
  for (int64_t j = 0; j < n; ++j) scores[j] *= inv_total;
}

template <typename scalar_t>
inline void add_scaled(float* out, const scalar_t* v, float weight, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) out[d] += weight * static_cast<float>(v[d]);
}

// Helper threads that stay awake between the calls of a decode step. Handing a chunk to a sleeping thread and
// waiting for it cost ~60-100 us a call here (measured 2026-12-05 with ATen's inter-op pool, which blocks at once:
// two wake-ups of a halted virtual CPU) — as much as a layer's attention at batch 16, so two threads were no faster
// than one. So:
// - a helper that has run a chunk waits for the next by spinning, `kSpinAlone` on the CPU's pause instruction, then
//   yielding its core to any other runnable thread (the server's event loop, a trainer's process) until `kSpin`, then
//   blocks: within a step (calls a few hundred us apart) it answers at once, and an idle engine keeps no core busy;
// - chunks are claimed, not assigned: the caller runs chunk 0, then claims every chunk no helper has yet, so a helper
//   that is asleep or descheduled (another process on its core) never makes a call slower than one thread would be;
//   the caller waits only for chunks a helper is running.
// One `run` at a time (a mutex): the engine has one worker thread. After a fork the child starts a fresh pool (the
// parent's threads do not exist there).
class HotPool {
 public:
  static constexpr int64_t kMaxChunks = 256;  // a helper thread each, at most

  static HotPool& instance() {
    static HotPool* pool = nullptr;
    static pid_t owner = 0;
    static std::mutex guard;
    std::lock_guard<std::mutex> lock(guard);
    if (pool == nullptr || owner != getpid()) {
      pool = new HotPool();  // never destroyed: helpers may still be blocked in it at exit (and a forked child's
      owner = getpid();      // copy of the parent's pool has no threads to join)
    }
    return *pool;
  }

  // Calls job(chunk) once for every chunk in [0, chunks), on the calling thread and up to chunks - 1 helpers; rethrows
  // the first exception after every chunk has finished (the job is borrowed by the helpers).
  template <typename Job>
  void run(int64_t chunks, Job&& job) {
    TORCH_CHECK(1 <= chunks && chunks <= kMaxChunks, "HotPool runs 1..", kMaxChunks, " chunks, got ", chunks);
    std::lock_guard<std::mutex> serial(run_mutex_);
    while (static_cast<int64_t>(helpers_.size()) < chunks - 1) {
      helpers_.emplace_back([this] { serve(); });
      helpers_.back().detach();
    }
    std::vector<std::exception_ptr> failures(chunks);
    const std::function<void(int64_t)> guarded = [&](int64_t chunk) {
      try {
        job(chunk);
      } catch (...) {
        failures[chunk] = std::current_exception();
      }
    };
    const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
    // First the claim word: a helper still holding the previous generation can no longer claim anything.
    claims_.store(generation << kChunkBits | 1, std::memory_order_seq_cst);
    job_.store(&guarded, std::memory_order_relaxed);
    chunks_.store(chunks, std::memory_order_relaxed);
    unfinished_.store(chunks - 1, std::memory_order_relaxed);
    generation_.store(generation, std::memory_order_seq_cst);  // publishes the three above
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
    guarded(0);
    run_claimed(generation, guarded, chunks);
    while (unfinished_.load(std::memory_order_acquire) > 0) pause();
    for (auto& failure : failures) {
      if (failure) std::rethrow_exception(failure);
    }
  }

 private:
  // Measured 2026-12-05, the compiled server on the benchmark's mixes against blocking at once (ATen's pool): 0.5, 2
  // and 5 ms of waiting all ran the turns mix 13-15 % and the 64 mixed requests 8-19 % faster, within noise of each
  // other. In the async RL loop (benchmarks/vs_trl.py), whose trainer process shares the two cores, 2 ms made a step
  // 2-5 % slower in four interleaved pairs; 0.5 ms did not (3.11 and 3.30 s against 3.51).
  static constexpr auto kSpinAlone = std::chrono::microseconds(50);
  static constexpr auto kSpin = std::chrono::microseconds(500);
  static constexpr int kChunkBits = 16;  // claims_ = generation << kChunkBits | the next unclaimed chunk
  static_assert(kMaxChunks < (int64_t{1} << kChunkBits), "chunk numbers must fit in the claim word");

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  // Claims and runs chunks of `generation` until none is left (or a newer generation has begun).
  void run_claimed(uint64_t generation, const std::function<void(int64_t)>& job, int64_t chunks) {
    uint64_t claim = claims_.load(std::memory_order_acquire);
    while (claim >> kChunkBits == generation && static_cast<int64_t>(claim & ((1u << kChunkBits) - 1)) < chunks) {
      if (claims_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) {
        job(static_cast<int64_t>(claim & ((1u << kChunkBits) - 1)));  // alive: `run` waits for this chunk
        unfinished_.fetch_sub(1, std::memory_order_release);
        claim = claims_.load(std::memory_order_acquire);
      }
    }
  }

  [[noreturn]] void serve() {
    uint64_t seen = 0;
    while (true) {
      const auto started = std::chrono::steady_clock::now();
      bool yielding = false;
      for (int spins = 1; generation_.load(std::memory_order_acquire) == seen; ++spins) {
        if (spins % 64 == 0) {
          const auto waited = std::chrono::steady_clock::now() - started;
          yielding = waited > kSpinAlone;
          if (waited > kSpin) {
            std::unique_lock<std::mutex> lock(sleep_mutex_);
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
          }
        }
        if (yielding) {
          std::this_thread::yield();
        } else {
          pause();
        }
      }
      seen = generation_.load(std::memory_order_acquire);
      // job_ and chunks_ may already be a later generation's; run_claimed then claims nothing, as `seen` is stale.
      run_claimed(seen, *job_.load(std::memory_order_relaxed), chunks_.load(std::memory_order_relaxed));
    }
  }

  std::mutex run_mutex_, sleep_mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> helpers_;
  std::atomic<const std::function<void(int64_t)>*> job_{nullptr};
  std::atomic<int64_t> chunks_{0};
  std::atomic<uint64_t> generation_{0}, claims_{0};
  std::atomic<int64_t> unfinished_{0}, sleepers_{0};
};

// Runs tasks [0, n) as `threads` contiguous chunks of about equal work (`work(task)`: keys read), the first on the
// calling thread and the others on `HotPool`'s helpers. Why not at::parallel_for: it splits over the intra-op
// threads, which the engine sets to one (a tiny model's matmuls run fastest single-threaded), while this loop reads
// memory, which more cores read faster.
template <typename Work, typename Run>
void run_split(int64_t n, int64_t threads, Work work, Run run) {
  threads = std::max<int64_t>(1, std::min({threads, n, HotPool::kMaxChunks}));
  if (threads == 1) return run(0, n);
  std::vector<int64_t> cumulative(n + 1, 0);
  for (int64_t task = 0; task < n; ++task) cumulative[task + 1] = cumulative[task] + work(task);
  std::vector<int64_t> bounds(threads + 1, n);
  bounds[0] = 0;
  for (int64_t chunk = 1; chunk < threads; ++chunk) {
    const int64_t target = cumulative[n] * chunk / threads;
    bounds[chunk] = std::lower_bound(cumulative.begin(), cumulative.end(), target) - cumulative.begin();
  }
  HotPool::instance().run(threads, [&](int64_t chunk) { run(bounds[chunk], bounds[chunk + 1]); });
}

// One (row, kv head) task: its G query heads (fp32, already scaled), its n cached keys and values (`key_stride` and
// `value_stride` elements apart), its new key and value, and where its G outputs go.
template <typename scalar_t>
struct Task {
  const float* query;
  const scalar_t* keys;
  const scalar_t* values;
  int64_t key_stride, value_stride, n;
  const scalar_t* key_new;
  const scalar_t* value_new;
  scalar_t* out;
};

// Runs every (row, kv head) task of the batch, split over `threads` by the keys each reads (`run_split`). Each thread
// calls `make_worker(groups, dim, longest)` once for the callable that runs one `Task` with that thread's scratch.
template <typename scalar_t, typename MakeWorker>
void for_each_task(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                   const at::Tensor& past_len, const at::Tensor& k_new, const at::Tensor& v_new, double scale,
                   int64_t threads, at::Tensor& out, MakeWorker make_worker) {
  const int64_t rows = q.size(0), kv_heads = q.size(1), groups = q.size(2), dim = q.size(3);
  const int64_t* lengths = past_len.data_ptr<int64_t>();
  const scalar_t* q_data = q.data_ptr<scalar_t>();
  const scalar_t* kc = k_cache.data_ptr<scalar_t>();
  const scalar_t* vc = v_cache.data_ptr<scalar_t>();
  const scalar_t* kn = k_new.data_ptr<scalar_t>();
  const scalar_t* vn = v_new.data_ptr<scalar_t>();
  scalar_t* out_data = out.data_ptr<scalar_t>();
  const int64_t longest = *std::max_element(lengths, lengths + rows);
  const float scale_f = static_cast<float>(scale);

  auto run_tasks = [&](int64_t begin, int64_t end) {
    std::vector<float> query(groups * dim);
    auto work = make_worker(groups, dim, longest);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / kv_heads, h = task % kv_heads;
      const scalar_t* task_query = q_data + task * groups * dim;
      for (int64_t i = 0; i < groups * dim; ++i) query[i] = static_cast<float>(task_query[i]) * scale_f;
      work(Task<scalar_t>{query.data(), kc + b * k_cache.stride(0) + h * k_cache.stride(1),
                          vc + b * v_cache.stride(0) + h * v_cache.stride(1), k_cache.stride(2), v_cache.stride(2),
                          lengths[b], kn + task * dim, vn + task * dim, out_data + task * groups * dim});
    }
  };
  run_split(rows * kv_heads, threads, [&](int64_t task) { return lengths[task / kv_heads] + 1; }, run_tasks);
}

// ----- fp32, head_dim = 16 * kChunks ------------------------------------------------------------------------------

// __builtin_shufflevector: Clang, and GCC from 12; an older compiler builds only the plain loops.
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define RL_RECIPE_FAST_KERNEL 1

constexpr int64_t kBlock = 16;  // keys per block: one vector of scores
typedef float Vec __attribute__((vector_size(kBlock * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);  // an unaligned vector load
  return v;
}

inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// Sixteen vectors of per-lane partial sums in, one vector out whose lane l is the total of part[l]. Four rounds, each
// halving the lanes per key while doubling the keys per vector (lanes of a key stay contiguous, keys stay in order):
// 15 shuffle pairs and adds for 16 keys, where a horizontal sum per key costs four shuffles and adds on its own.
inline Vec transpose_sum(Vec* part) {
  for (int64_t i = 0; i < 8; ++i) {
    const Vec a = part[2 * i], b = part[2 * i + 1];
    part[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
              __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  }
  for (int64_t i = 0; i < 4; ++i) {
    const Vec a = part[2 * i], b = part[2 * i + 1];
    part[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
              __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  }
  for (int64_t i = 0; i < 2; ++i) {
    const Vec a = part[2 * i], b = part[2 * i + 1];
    part[i] = __builtin_shufflevector(a, b, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
              __builtin_shufflevector(a, b, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  }
  return __builtin_shufflevector(part[0], part[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         __builtin_shufflevector(part[0], part[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

// One task (`Task`) of G query heads; `scores` holds each head's scores `score_stride` apart. Scores: per block of
// 16 keys and query head, each key's head_dim products summed into one vector, then the block's 16 vectors transposed
// and summed into its 16 scores. Values: per block and query head, the probability-weighted values added into an
// accumulator held in registers. A block's keys (or values) stay in L1 while every query head
// reads them, so the cache is streamed from memory once.
template <int64_t kChunks>
struct FastKernel {
  static constexpr int64_t kDim = kChunks * kBlock;

  static void run(const Task<float>& task, int64_t groups, float* scores, int64_t score_stride) {
    const float *query = task.query, *keys = task.keys, *values = task.values;
    const int64_t n = task.n;
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
      const int64_t m = std::min(kBlock, n - j0);
      for (int64_t g = 0; g < groups; ++g) {
        Vec q[kChunks];
        for (int64_t c = 0; c < kChunks; ++c) q[c] = load(query + g * kDim + c * kBlock);
        Vec part[kBlock];
        for (int64_t l = 0; l < kBlock; ++l) {
          // A short last block repeats its last key.
          const float* key = keys + (j0 + std::min(l, m - 1)) * task.key_stride;
          Vec sum = load(key) * q[0];
          for (int64_t c = 1; c < kChunks; ++c) sum += load(key + c * kBlock) * q[c];
          part[l] = sum;
        }
        store(scores + g * score_stride + j0, transpose_sum(part));  // lanes past n are overwritten below
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      float* row_scores = scores + g * score_stride;
      row_scores[n] = dot(query + g * kDim, task.key_new, kDim);
      softmax_in_place(row_scores, n + 1);
    }
    Vec acc[kChunks];
    for (int64_t g = 0; g < groups; ++g) {
      const float weight = scores[g * score_stride + n];
      for (int64_t c = 0; c < kChunks; ++c) {
        store(task.out + g * kDim + c * kBlock, load(task.value_new + c * kBlock) * weight);
      }
    }
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
      const int64_t m = std::min(kBlock, n - j0);
      for (int64_t g = 0; g < groups; ++g) {
        const float* weights = scores + g * score_stride + j0;
        for (int64_t c = 0; c < kChunks; ++c) acc[c] = load(task.out + g * kDim + c * kBlock);
        for (int64_t l = 0; l < m; ++l) {
          const float* value = values + (j0 + l) * task.value_stride;
          for (int64_t c = 0; c < kChunks; ++c) acc[c] += load(value + c * kBlock) * weights[l];
        }
        for (int64_t c = 0; c < kChunks; ++c) store(task.out + g * kDim + c * kBlock, acc[c]);
      }
    }
  }
};

using FastRun = void (*)(const Task<float>&, int64_t, float*, int64_t);

FastRun fast_kernel_for(int64_t dim) {
  switch (dim) {
    case 64:
      return &FastKernel<4>::run;
    case 128:
      return &FastKernel<8>::run;
    case 256:
      return &FastKernel<16>::run;
    default:
      return nullptr;
  }
}

bool fast_path(const at::Tensor& q) { return q.scalar_type() == at::kFloat && fast_kernel_for(q.size(3)) != nullptr; }

// The fast path's per-thread worker: each query head's scores padded so a block's full-vector store never reaches the
// next head's.
auto fast_worker(FastRun run) {
  return [run](int64_t groups, int64_t, int64_t longest) {
    const int64_t score_stride = (longest + 1 + kBlock - 1) / kBlock * kBlock + kBlock;
    std::vector<float> scores(groups * score_stride);
    return [run, groups, score_stride, scores = std::move(scores)](const Task<float>& task) mutable {
      run(task, groups, scores.data(), score_stride);
    };
  };
}

#endif  // RL_RECIPE_FAST_KERNEL

// ----- any dtype, any head_dim ------------------------------------------------------------------------------------

template <typename scalar_t>
void plain_task(const Task<scalar_t>& task, int64_t groups, int64_t dim, float* scores, float* acc) {
  const int64_t n = task.n;
  // scores[g * (n + 1) + j]: position j < n of the cache, then the new key at j = n.
  for (int64_t j = 0; j < n; ++j) {
    const scalar_t* key = task.keys + j * task.key_stride;
    for (int64_t g = 0; g < groups; ++g) scores[g * (n + 1) + j] = dot(task.query + g * dim, key, dim);
  }
  for (int64_t g = 0; g < groups; ++g) {
    float* row_scores = scores + g * (n + 1);
    row_scores[n] = dot(task.query + g * dim, task.key_new, dim);
    softmax_in_place(row_scores, n + 1);
  }
  std::fill(acc, acc + groups * dim, 0.f);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < groups; ++g) {
      add_scaled(acc + g * dim, task.values + j * task.value_stride, scores[g * (n + 1) + j], dim);
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    add_scaled(acc + g * dim, task.value_new, scores[g * (n + 1) + n], dim);
    for (int64_t d = 0; d < dim; ++d) task.out[g * dim + d] = static_cast<scalar_t>(acc[g * dim + d]);
  }
}

template <typename scalar_t>
auto plain_worker() {
  return [](int64_t groups, int64_t dim, int64_t longest) {
    return [groups, dim, scores = std::vector<float>(groups * (longest + 1)),
            acc = std::vector<float>(groups * dim)](const Task<scalar_t>& task) mutable {
      plain_task(task, groups, dim, scores.data(), acc.data());
    };
  };
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& past_len, const at::Tensor& k_new, const at::Tensor& v_new,
                            double scale, int64_t threads) {
  TORCH_CHECK(threads >= 1, "threads must be >= 1, got ", threads);
  TORCH_CHECK(q.dim() == 4, "q must be [rows, kv_heads, groups, head_dim], got ", q.sizes());
  TORCH_CHECK(k_cache.dim() == 4 && v_cache.dim() == 4, "k_cache/v_cache must be [rows, kv_heads, positions, head_dim]");
  TORCH_CHECK(k_cache.stride(3) == 1 && v_cache.stride(3) == 1, "the caches' head_dim must be contiguous");
  TORCH_CHECK(k_cache.size(0) == q.size(0) && k_cache.size(1) == q.size(1) && k_cache.size(3) == q.size(3),
              "k_cache ", k_cache.sizes(), " does not match q ", q.sizes());
  TORCH_CHECK(v_cache.sizes() == k_cache.sizes(), "v_cache ", v_cache.sizes(), " != k_cache ", k_cache.sizes());
  TORCH_CHECK(past_len.dtype() == at::kLong && past_len.numel() == q.size(0), "past_len must be int64 [rows]");
  TORCH_CHECK(k_new.numel() == q.size(0) * q.size(1) * q.size(3) && v_new.numel() == k_new.numel(),
              "k_new/v_new must hold [rows, kv_heads, head_dim]");
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type() && q.scalar_type() == k_new.scalar_type(),
              "q, the caches and the new keys/values must share a dtype");
  const at::Tensor lengths = past_len.contiguous();
  const int64_t* length = lengths.data_ptr<int64_t>();
  for (int64_t b = 0; b < lengths.numel(); ++b) {
    TORCH_CHECK(0 <= length[b] && length[b] <= k_cache.size(2), "row ", b, "'s past length ", length[b],
                " is outside the cache's 0..", k_cache.size(2));
  }
  at::Tensor out = at::empty(q.sizes(), q.options());
  if (q.numel() == 0) return out;
  const at::Tensor q_c = q.contiguous(), k_new_c = k_new.contiguous(), v_new_c = v_new.contiguous();
#ifdef RL_RECIPE_FAST_KERNEL
  if (fast_path(q)) {
    for_each_task<float>(q_c, k_cache, v_cache, lengths, k_new_c, v_new_c, scale, threads, out,
                         fast_worker(fast_kernel_for(q.size(3))));
    return out;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "decode_attention", [&] {
    for_each_task<scalar_t>(q_c, k_cache, v_cache, lengths, k_new_c, v_new_c, scale, threads, out,
                            plain_worker<scalar_t>());
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(rl_recipe, m) {
  m.def("decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor past_len, Tensor k_new, Tensor v_new, "
        "float scale, int threads=1) -> Tensor");
}

TORCH_LIBRARY_IMPL(rl_recipe, CPU, m) { m.impl("decode_attention", &decode_attention); }
