#include "train/adapter_merge.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/dtype.h"

namespace kiln {

namespace {

std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  to_f32(t.dtype(), t.raw(), out.data(), out.size());
  return out;
}

using Mat = std::vector<double>;  // row-major

// Orthonormalises the k columns of the m x k matrix `y` in place (modified Gram-Schmidt, twice).
void orthonormalise(Mat& y, int64_t m, int64_t k) {
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t p = 0; p < j; ++p) {
        double d = 0;
        for (int64_t i = 0; i < m; ++i) d += y[i * k + j] * y[i * k + p];
        for (int64_t i = 0; i < m; ++i) y[i * k + j] -= d * y[i * k + p];
      }
      double n = 0;
      for (int64_t i = 0; i < m; ++i) n += y[i * k + j] * y[i * k + j];
      n = std::sqrt(n);
      for (int64_t i = 0; i < m; ++i) y[i * k + j] = n > 1e-300 ? y[i * k + j] / n : 0.0;
    }
}

// Eigen-decomposition of the symmetric k x k matrix `c` by cyclic Jacobi rotations: eigenvalues
// (descending) and eigenvectors as the columns of `u`.
void jacobi_eigen(Mat c, int64_t k, std::vector<double>& values, Mat& u) {
  u.assign(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) u[i * k + i] = 1;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t p = 0; p < k; ++p)
      for (int64_t q = p + 1; q < k; ++q) off += c[p * k + q] * c[p * k + q];
    if (off < 1e-30) break;
    for (int64_t p = 0; p < k; ++p)
      for (int64_t q = p + 1; q < k; ++q) {
        if (std::fabs(c[p * k + q]) < 1e-300) continue;
        const double theta = (c[q * k + q] - c[p * k + p]) / (2 * c[p * k + q]);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double cs = 1 / std::sqrt(t * t + 1), sn = t * cs;
        for (int64_t i = 0; i < k; ++i) {  // columns p, q
          const double a = c[i * k + p], b = c[i * k + q];
          c[i * k + p] = cs * a - sn * b;
          c[i * k + q] = sn * a + cs * b;
        }
        for (int64_t i = 0; i < k; ++i) {  // rows p, q
          const double a = c[p * k + i], b = c[q * k + i];
          c[p * k + i] = cs * a - sn * b;
          c[q * k + i] = sn * a + cs * b;
        }
        for (int64_t i = 0; i < k; ++i) {
          const double a = u[i * k + p], b = u[i * k + q];
          u[i * k + p] = cs * a - sn * b;
          u[i * k + q] = sn * a + cs * b;
        }
      }
  }
  std::vector<int64_t> order(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return c[a * k + a] > c[b * k + b]; });
  Mat sorted(static_cast<size_t>(k * k));
  values.resize(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    values[j] = c[order[j] * k + order[j]];
    for (int64_t i = 0; i < k; ++i) sorted[i * k + j] = u[i * k + order[j]];
  }
  u = std::move(sorted);
}

// The best rank-r factors (b [m, r], a [r, n]) of the m x n matrix `d`: a randomised range finder
// with oversampling and two power iterations, then the exact eigen-decomposition of Q^T D D^T Q.
void truncated_factors(const Mat& d, int64_t m, int64_t n, int64_t r, std::vector<float>& b, std::vector<float>& a) {
  const int64_t k = std::min<int64_t>(r + 8, std::min(m, n));
  std::mt19937_64 rng(0x5eed);
  std::normal_distribution<double> normal;
  Mat g(static_cast<size_t>(n * k));
  for (double& x : g) x = normal(rng);
  Mat q(static_cast<size_t>(m * k), 0.0), z(static_cast<size_t>(n * k), 0.0);
  auto d_times = [&](const Mat& x, Mat& y) {  // y [m,k] = d [m,n] x [n,k]
    std::fill(y.begin(), y.end(), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t l = 0; l < n; ++l) {
        const double v = d[i * n + l];
        if (v != 0)
          for (int64_t j = 0; j < k; ++j) y[i * k + j] += v * x[l * k + j];
      }
  };
  auto dt_times = [&](const Mat& y, Mat& x) {  // x [n,k] = d^T y
    std::fill(x.begin(), x.end(), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t l = 0; l < n; ++l) {
        const double v = d[i * n + l];
        if (v != 0)
          for (int64_t j = 0; j < k; ++j) x[l * k + j] += v * y[i * k + j];
      }
  };
  d_times(g, q);
  orthonormalise(q, m, k);
  for (int it = 0; it < 2; ++it) {
    dt_times(q, z);
    orthonormalise(z, n, k);
    d_times(z, q);
    orthonormalise(q, m, k);
  }
  dt_times(q, z);  // z = D^T Q, so (Q^T D) = z^T: [k, n]
  Mat c(static_cast<size_t>(k * k), 0.0);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t s = 0; s < k; ++s) {
      double acc = 0;
      for (int64_t l = 0; l < n; ++l) acc += z[l * k + p] * z[l * k + s];
      c[p * k + s] = acc;
    }
  std::vector<double> values;
  Mat u;
  jacobi_eigen(c, k, values, u);
  b.assign(static_cast<size_t>(m * r), 0.f);
  a.assign(static_cast<size_t>(r * n), 0.f);
  for (int64_t j = 0; j < std::min(r, k); ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += q[i * k + p] * u[p * k + j];
      b[i * r + j] = static_cast<float>(acc);
    }
    for (int64_t l = 0; l < n; ++l) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += u[p * k + j] * z[l * k + p];
      a[j * n + l] = static_cast<float>(acc);
    }
  }
}

}  // namespace

Result<HostLoraAdapter> merge_adapters(const std::vector<MergeSource>& sources, const MergeOptions& options,
                                       const ModelConfig& model) {
  if (sources.empty()) return invalid_argument("sources: at least one adapter is needed");
  double weight_sum = 0;
  int64_t rank_sum = 0, rank_max = 0;
  LoraConfig cfg;
  cfg.targets.clear();
  bool all_layers = false;
  std::vector<int64_t> layers;
  for (size_t i = 0; i < sources.size(); ++i) {
    const MergeSource& s = sources[i];
    if (!std::isfinite(s.weight)) return invalid_argument("sources[" + std::to_string(i) + "].weight is not finite");
    weight_sum += s.weight;
    const LoraConfig& c = s.adapter->config;
    rank_sum += c.rank;
    rank_max = std::max(rank_max, c.rank);
    for (LoraTarget t : c.targets)
      if (!cfg.has_target(t)) cfg.targets.push_back(t);
    if (c.layers.empty()) all_layers = true;
    layers.insert(layers.end(), c.layers.begin(), c.layers.end());
  }
  std::sort(cfg.targets.begin(), cfg.targets.end());
  if (!all_layers) {
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    cfg.layers = layers;
  }
  std::vector<double> coef(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    coef[i] = sources[i].weight;
    if (options.method == MergeMethod::kWeightedAverage) {
      if (std::fabs(weight_sum) < 1e-12) return invalid_argument("sources: the weights sum to zero, so they cannot be averaged");
      coef[i] /= weight_sum;
    }
    coef[i] *= sources[i].adapter->config.scale();  // the merged adapter's scale is 1
  }
  const bool ties = options.method == MergeMethod::kTies;
  cfg.rank = ties ? (options.rank > 0 ? options.rank : rank_max) : rank_sum;
  cfg.alpha = static_cast<double>(cfg.rank);
  if (ties && !(options.density > 0 && options.density <= 1)) return invalid_argument("density must be in (0, 1]");
  KILN_ASSIGN_OR_RETURN(HostLoraAdapter merged, HostLoraAdapter::init(cfg, model, 0));
  for (int64_t layer = 0; layer < merged.num_layers(); ++layer)
    for (int ti = 0; ti < kLoraTargetCount; ++ti) {
      const LoraTarget t = static_cast<LoraTarget>(ti);
      LoraFactors& out = merged.factors(layer, t);
      if (!out.defined()) continue;
      const int64_t r = cfg.rank, in = out.a.dim(1), o = out.b.dim(0);  // HostLoraAdapter::init's shapes
      std::vector<float> a(static_cast<size_t>(r * in), 0.f), b(static_cast<size_t>(o * r), 0.f);
      if (!ties) {
        int64_t offset = 0;
        for (size_t k = 0; k < sources.size(); ++k) {
          const HostLoraAdapter& src = *sources[k].adapter;
          const int64_t rk = src.config.rank;
          const LoraFactors& f = layer < src.num_layers() ? src.factors(layer, t) : LoraFactors{};
          if (f.defined()) {
            const std::vector<float> fa = as_f32(f.a), fb = as_f32(f.b);
            std::copy(fa.begin(), fa.end(), a.begin() + offset * in);
            for (int64_t i = 0; i < o; ++i)
              for (int64_t j = 0; j < rk; ++j) b[i * r + offset + j] = static_cast<float>(coef[k] * fb[i * rk + j]);
          }
          offset += rk;
        }
      } else {
        // Dense deltas, trimmed, sign-elected, disjoint mean.
        std::vector<Mat> deltas;
        for (size_t k = 0; k < sources.size(); ++k) {
          const HostLoraAdapter& src = *sources[k].adapter;
          const LoraFactors& f = layer < src.num_layers() ? src.factors(layer, t) : LoraFactors{};
          if (!f.defined()) continue;
          const int64_t rk = src.config.rank;
          const std::vector<float> fa = as_f32(f.a), fb = as_f32(f.b);
          Mat d(static_cast<size_t>(o * in), 0.0);
          for (int64_t i = 0; i < o; ++i)
            for (int64_t j = 0; j < rk; ++j) {
              const double bij = coef[k] * fb[i * rk + j];
              if (bij != 0)
                for (int64_t l = 0; l < in; ++l) d[i * in + l] += bij * fa[j * in + l];
            }
          const size_t keep = static_cast<size_t>(std::ceil(options.density * static_cast<double>(d.size())));
          if (keep < d.size()) {
            std::vector<double> mags(d.size());
            for (size_t e = 0; e < d.size(); ++e) mags[e] = std::fabs(d[e]);
            std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(d.size() - keep), mags.end());
            const double threshold = mags[d.size() - keep];
            for (double& x : d)
              if (std::fabs(x) < threshold) x = 0;
          }
          deltas.push_back(std::move(d));
        }
        Mat merged_delta(static_cast<size_t>(o * in), 0.0);
        for (size_t e = 0; e < merged_delta.size(); ++e) {
          double sum = 0;
          for (const Mat& d : deltas) sum += d[e];
          if (sum == 0) continue;
          double acc = 0;
          int n = 0;
          for (const Mat& d : deltas)
            if (d[e] != 0 && (d[e] > 0) == (sum > 0)) acc += d[e], ++n;
          merged_delta[e] = n > 0 ? acc / n : 0.0;
        }
        truncated_factors(merged_delta, o, in, r, b, a);
      }
      out.a = Tensor::from_values(a, {r, in});
      out.b = Tensor::from_values(b, {o, r});
    }
  return merged;
}

}  // namespace kiln
