// Naive references: the definitions the optimized kernels are tested against. Each loop follows
// the maths line by line; nothing here is parallel, blocked or fused.
#include "kernels/cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace strata::kernels::ref {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      T acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const T av = trans_a ? a[p * lda + i] : a[i * lda + p];
        const T bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      // beta == 0 overwrites (C may hold garbage), as BLAS does.
      c[i * ldc + j] = alpha * acc + (beta == T(0) ? T(0) : beta * c[i * ldc + j]);
    }
  }
}

template <typename T>
void linear_forward(T* y, const T* x, const T* w, const T* bias, int64_t n, int64_t in,
                    int64_t out) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      T acc = bias ? bias[o] : T(0);
      for (int64_t p = 0; p < in; ++p) acc += x[i * in + p] * w[o * in + p];
      y[i * out + o] = acc;
    }
  }
}

template <typename T>
void linear_backward(T* dx, T* dw, T* dbias, const T* dy, const T* x, const T* w, int64_t n,
                     int64_t in, int64_t out) {
  if (dx) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t p = 0; p < in; ++p) {
        T acc = 0;
        for (int64_t o = 0; o < out; ++o) acc += dy[i * out + o] * w[o * in + p];
        dx[i * in + p] = acc;
      }
    }
  }
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t p = 0; p < in; ++p) {
      T acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += dy[i * out + o] * x[i * in + p];
      dw[o * in + p] += acc;
    }
  }
  if (dbias) {
    for (int64_t o = 0; o < out; ++o) {
      T acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += dy[i * out + o];
      dbias[o] += acc;
    }
  }
}

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b,
                       int64_t t, int64_t c) {
  for (int64_t i = 0; i < b * t; ++i) {
    const int64_t pos = i % t;
    for (int64_t j = 0; j < c; ++j) {
      out[i * c + j] = wte[tokens[i] * c + j] + (wpe ? wpe[pos * c + j] : T(0));
    }
  }
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t b,
                        int64_t t, int64_t c) {
  for (int64_t i = 0; i < b * t; ++i) {
    const int64_t pos = i % t;
    for (int64_t j = 0; j < c; ++j) {
      dwte[tokens[i] * c + j] += dout[i * c + j];
      if (dwpe) dwpe[pos * c + j] += dout[i * c + j];
    }
  }
}

template <typename T>
void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* bias, int64_t n,
                       int64_t c, T eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * c;
    T mu = 0;
    for (int64_t j = 0; j < c; ++j) mu += xr[j];
    mu /= T(c);
    T var = 0;
    for (int64_t j = 0; j < c; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= T(c);
    const T rs = T(1) / std::sqrt(var + eps);
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = (xr[j] - mu) * rs * w[j] + bias[j];
    mean[i] = mu;
    rstd[i] = rs;
  }
}

template <typename T>
void layernorm_backward(T* dx, T* dw, T* dbias, const T* dy, const T* x, const T* w, const T* mean,
                        const T* rstd, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* dyr = dy + i * c;
    const T* xr = x + i * c;
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
    T mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      const T xhat = (xr[j] - mean[i]) * rstd[i];
      mean_g += dyr[j] * w[j];
      mean_gx += dyr[j] * w[j] * xhat;
    }
    mean_g /= T(c);
    mean_gx /= T(c);
    for (int64_t j = 0; j < c; ++j) {
      const T xhat = (xr[j] - mean[i]) * rstd[i];
      dx[i * c + j] += rstd[i] * (dyr[j] * w[j] - mean_g - xhat * mean_gx);
      dw[j] += dyr[j] * xhat;
      dbias[j] += dyr[j];
    }
  }
}

template <typename T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int64_t n, int64_t c, T eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * c;
    T ms = 0;
    for (int64_t j = 0; j < c; ++j) ms += xr[j] * xr[j];
    ms /= T(c);
    const T rs = T(1) / std::sqrt(ms + eps);
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = xr[j] * rs * w[j];
    rstd[i] = rs;
  }
}

template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t n,
                      int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* dyr = dy + i * c;
    const T* xr = x + i * c;
    // dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd.
    T mean_gx = 0;
    for (int64_t j = 0; j < c; ++j) mean_gx += dyr[j] * w[j] * xr[j] * rstd[i];
    mean_gx /= T(c);
    for (int64_t j = 0; j < c; ++j) {
      const T xhat = xr[j] * rstd[i];
      dx[i * c + j] += rstd[i] * (dyr[j] * w[j] - xhat * mean_gx);
      dw[j] += dyr[j] * xhat;
    }
  }
}

namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCube = 0.044715;
}  // namespace

template <typename T>
void gelu_forward(T* y, const T* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const T u = T(kGeluScale) * (x[i] + T(kGeluCube) * x[i] * x[i] * x[i]);
    y[i] = T(0.5) * x[i] * (T(1) + std::tanh(u));
  }
}

template <typename T>
void gelu_backward(T* dx, const T* x, const T* dy, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const T xi = x[i];
    const T u = T(kGeluScale) * (xi + T(kGeluCube) * xi * xi * xi);
    const T th = std::tanh(u);
    const T du = T(kGeluScale) * (T(1) + T(3 * kGeluCube) * xi * xi);
    const T grad = T(0.5) * (T(1) + th) + T(0.5) * xi * (T(1) - th * th) * du;
    dx[i] = dy[i] * grad;
  }
}

template <typename T>
void swiglu_forward(T* y, const T* gate_up, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < f; ++j) {
      const T g = gate_up[i * 2 * f + j], u = gate_up[i * 2 * f + f + j];
      const T sig = T(1) / (T(1) + std::exp(-g));
      y[i * f + j] = g * sig * u;
    }
  }
}

template <typename T>
void swiglu_backward(T* dgate_up, const T* gate_up, const T* dy, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < f; ++j) {
      const T g = gate_up[i * 2 * f + j], u = gate_up[i * 2 * f + f + j];
      const T sig = T(1) / (T(1) + std::exp(-g));
      const T d = dy[i * f + j];
      dgate_up[i * 2 * f + j] = d * u * (sig + g * sig * (T(1) - sig));  // d silu / dg
      dgate_up[i * 2 * f + f + j] = d * g * sig;
    }
  }
}

namespace {
// Rotates every q and k head of every row by angle sign * t * inv_freq[i] (pairs i, i + hd/2).
template <typename T>
void rope_rotate(T* qkv, const AttentionShape& s, const RopeSpec& rope, double sign) {
  const int64_t row = s.qkv_width(), hd = s.head_dim, half = hd / 2;
  for (int64_t bi = 0; bi < s.b; ++bi) {
    for (int64_t ti = 0; ti < s.t; ++ti) {
      T* r = qkv + (bi * s.t + ti) * row;
      for (int64_t h = 0; h < s.qk_heads(); ++h) {  // q heads, then k heads; v is untouched
        T* head = r + h * hd;
        for (int64_t i = 0; i < half; ++i) {
          const double angle = sign * double(ti) * rope_inv_freq(rope, i, hd);
          const T cs = T(std::cos(angle)), sn = T(std::sin(angle));
          const T x1 = head[i], x2 = head[i + half];
          head[i] = x1 * cs - x2 * sn;
          head[i + half] = x2 * cs + x1 * sn;
        }
      }
    }
  }
}
}  // namespace

template <typename T>
void rope_forward(T* qkv, const AttentionShape& s, const RopeSpec& rope) {
  rope_rotate(qkv, s, rope, 1.0);
}

template <typename T>
void rope_backward(T* dqkv, const AttentionShape& s, const RopeSpec& rope) {
  // The rotation is orthogonal: its transpose (the gradient map) is the rotation by -angle.
  rope_rotate(dqkv, s, rope, -1.0);
}

// Per-head RMSNorm of q and k: each head row of each token through rmsnorm_forward/backward above
// (one row of hd values at a time), with q heads weighted by wq and k heads by wk.
template <typename T>
void head_rmsnorm_forward(T* qkv, T* pre, T* rstd, const T* wq, const T* wk,
                          const AttentionShape& s, T eps) {
  const int64_t hd = s.head_dim, heads = s.qk_heads();
  for (int64_t i = 0; i < s.rows(); ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      T* x = qkv + i * s.qkv_width() + h * hd;
      T* kept = pre + (i * heads + h) * hd;
      std::copy(x, x + hd, kept);
      rmsnorm_forward(x, rstd + i * heads + h, kept, h < s.heads ? wq : wk, 1, hd, eps);
    }
  }
}

template <typename T>
void head_rmsnorm_backward(T* dqkv, T* dwq, T* dwk, const T* pre, const T* rstd, const T* wq,
                           const T* wk, const AttentionShape& s) {
  const int64_t hd = s.head_dim, heads = s.qk_heads();
  std::vector<T> dx(static_cast<size_t>(hd));
  for (int64_t i = 0; i < s.rows(); ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      T* d = dqkv + i * s.qkv_width() + h * hd;
      std::fill(dx.begin(), dx.end(), T(0));
      const bool q = h < s.heads;
      rmsnorm_backward(dx.data(), q ? dwq : dwk, d, pre + (i * heads + h) * hd, q ? wq : wk,
                       rstd + i * heads + h, 1, hd);
      std::copy(dx.begin(), dx.end(), d);
    }
  }
}

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t b, int64_t t, int64_t nh,
                       int64_t nkv, int64_t hd) {
  const int64_t row = (nh + 2 * nkv) * hd, group = nh / nkv;
  const T scale = T(1) / std::sqrt(T(hd));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t kvh = h / group;
      for (int64_t t1 = 0; t1 < t; ++t1) {
        const T* q = qkv + (bi * t + t1) * row + h * hd;
        T* p = probs + ((bi * nh + h) * t + t1) * t;
        T maxv = -INFINITY;
        for (int64_t t2 = 0; t2 <= t1; ++t2) {
          const T* k = qkv + (bi * t + t2) * row + (nh + kvh) * hd;
          T s = 0;
          for (int64_t d = 0; d < hd; ++d) s += q[d] * k[d];
          p[t2] = s * scale;
          maxv = std::max(maxv, p[t2]);
        }
        T sum = 0;
        for (int64_t t2 = 0; t2 <= t1; ++t2) {
          p[t2] = std::exp(p[t2] - maxv);
          sum += p[t2];
        }
        for (int64_t t2 = 0; t2 < t; ++t2) p[t2] = t2 <= t1 ? p[t2] / sum : T(0);
        T* o = out + (bi * t + t1) * nh * hd + h * hd;
        for (int64_t d = 0; d < hd; ++d) {
          T acc = 0;
          for (int64_t t2 = 0; t2 <= t1; ++t2) {
            acc += p[t2] * qkv[(bi * t + t2) * row + (nh + nkv + kvh) * hd + d];
          }
          o[d] = acc;
        }
      }
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int64_t b, int64_t t,
                        int64_t nh, int64_t nkv, int64_t hd) {
  const int64_t row = (nh + 2 * nkv) * hd, group = nh / nkv;
  const T scale = T(1) / std::sqrt(T(hd));
  std::fill(dqkv, dqkv + b * t * row, T(0));
  std::vector<T> dp(static_cast<size_t>(t));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t kvh = h / group;
      const int64_t qo = h * hd, ko = (nh + kvh) * hd, vo = (nh + nkv + kvh) * hd;
      for (int64_t t1 = 0; t1 < t; ++t1) {
        const T* p = probs + ((bi * nh + h) * t + t1) * t;
        const T* dor = dout + (bi * t + t1) * nh * hd + h * hd;
        // out = sum p v: dv += p * dout, dp = dout . v
        T dot = 0;  // sum_t2 p * dp, the softmax backward's row term
        for (int64_t t2 = 0; t2 <= t1; ++t2) {
          const T* v = qkv + (bi * t + t2) * row + vo;
          T* dv = dqkv + (bi * t + t2) * row + vo;
          T s = 0;
          for (int64_t d = 0; d < hd; ++d) {
            dv[d] += p[t2] * dor[d];
            s += dor[d] * v[d];
          }
          dp[t2] = s;
          dot += p[t2] * s;
        }
        // ds = p * (dp - dot); s = scale * q . k
        const T* q = qkv + (bi * t + t1) * row + qo;
        T* dq = dqkv + (bi * t + t1) * row + qo;
        for (int64_t t2 = 0; t2 <= t1; ++t2) {
          const T ds = p[t2] * (dp[t2] - dot) * scale;
          const T* k = qkv + (bi * t + t2) * row + ko;
          T* dk = dqkv + (bi * t + t2) * row + ko;
          for (int64_t d = 0; d < hd; ++d) {
            dq[d] += ds * k[d];
            dk[d] += ds * q[d];
          }
        }
      }
    }
  }
}

namespace {
// -log softmax(row)[target] computed stably (max subtracted), in double.
template <typename T>
double row_loss(const T* row, int64_t v, int32_t target, double* max_out, double* sum_out) {
  double maxv = -INFINITY;
  for (int64_t j = 0; j < v; ++j) maxv = std::max(maxv, double(row[j]));
  double sum = 0;
  for (int64_t j = 0; j < v; ++j) sum += std::exp(double(row[j]) - maxv);
  *max_out = maxv;
  *sum_out = sum;
  return std::log(sum) + maxv - double(row[target]);
}
}  // namespace

template <typename T>
double cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t n,
                             int64_t v) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] < 0) {
      losses[i] = 0;
      continue;
    }
    double maxv, sum;
    const double loss = row_loss(logits + i * v, v, targets[i], &maxv, &sum);
    losses[i] = T(loss);
    total += loss;
  }
  return total;
}

template <typename T>
double cross_entropy_forward_backward(T* losses, T* logits, const int32_t* targets, int64_t n,
                                      int64_t v, T grad_scale) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    T* row = logits + i * v;
    if (targets[i] < 0) {
      losses[i] = 0;
      std::fill(row, row + v, T(0));
      continue;
    }
    double maxv, sum;
    const double loss = row_loss(row, v, targets[i], &maxv, &sum);
    losses[i] = T(loss);
    total += loss;
    for (int64_t j = 0; j < v; ++j) {
      const double prob = std::exp(double(row[j]) - maxv) / sum;
      row[j] = T((prob - (j == targets[i] ? 1.0 : 0.0)) * double(grad_scale));
    }
  }
  return total;
}

template <typename T>
void add(T* out, const T* a, const T* b, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}
template <typename T>
void add_inplace(T* y, const T* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] += x[i];
}
template <typename T>
void scale_inplace(T* y, T s, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] *= s;
}

template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t count, double lr, double beta1,
                  double beta2, double eps, double weight_decay, double grad_scale, int64_t step) {
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  for (int64_t i = 0; i < count; ++i) {
    const double gi = double(g[i]) * grad_scale;
    double pi = double(p[i]) * (1.0 - lr * weight_decay);
    const double mi = beta1 * double(m[i]) + (1.0 - beta1) * gi;
    const double vi = beta2 * double(v[i]) + (1.0 - beta2) * gi * gi;
    pi -= (lr / bc1) * mi / (std::sqrt(vi) / std::sqrt(bc2) + eps);
    p[i] = T(pi);
    m[i] = T(mi);
    v[i] = T(vi);
  }
}

template <typename T>
double sum_squares(const T* x, int64_t count) {
  double s = 0;
  for (int64_t i = 0; i < count; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

// clang-format off
#define STRATA_REF_INSTANTIATE(T)                                                                  \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*,     \
                        int64_t, T, T*, int64_t);                                                  \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);    \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t,     \
                                   int64_t);                                                       \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,     \
                                     int64_t);                                                     \
  template void embedding_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t);\
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, T);\
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,\
                                      int64_t, int64_t);                                           \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, T);               \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t,       \
                                    int64_t);                                                      \
  template void gelu_forward<T>(T*, const T*, int64_t);                                            \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                                 \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t);                                 \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t);                      \
  template void rope_forward<T>(T*, const AttentionShape&, const RopeSpec&);                        \
  template void rope_backward<T>(T*, const AttentionShape&, const RopeSpec&);                       \
  template void head_rmsnorm_forward<T>(T*, T*, T*, const T*, const T*, const AttentionShape&, T);  \
  template void head_rmsnorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,        \
                                         const AttentionShape&);                                    \
  template void attention_forward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t,         \
                                     int64_t);                                                     \
  template void attention_backward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                      int64_t, int64_t);                                           \
  template double cross_entropy_forward<T>(T*, const T*, const int32_t*, int64_t, int64_t);        \
  template double cross_entropy_forward_backward<T>(T*, T*, const int32_t*, int64_t, int64_t, T);  \
  template void add<T>(T*, const T*, const T*, int64_t);                                           \
  template void add_inplace<T>(T*, const T*, int64_t);                                             \
  template void scale_inplace<T>(T*, T, int64_t);                                                  \
  template void adamw_update<T>(T*, const T*, T*, T*, int64_t, double, double, double, double,     \
                                double, double, int64_t);                                          \
  template double sum_squares<T>(const T*, int64_t);
// clang-format on

STRATA_REF_INSTANTIATE(float)
STRATA_REF_INSTANTIATE(double)
#undef STRATA_REF_INSTANTIATE

}  // namespace strata::kernels::ref
