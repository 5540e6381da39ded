// Cooperative (ucontext) emulation of a CUDA block: one context per thread, warp and block
// barriers, warp collectives (shfl, ldmatrix, mma) through per-warp slots.
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_runtime.h"

namespace emu {
namespace {
struct Thread {
  ucontext_t ctx;
  Idx tid;
  int state = 0;  // 0 runnable, 1 waiting, 2 done
  std::vector<char> stack;
};
std::vector<Thread> threads;
ucontext_t sched;
int cur = -1;
Idx bidx, bdim, gdim;
alignas(16) unsigned char smem_buf[232 * 1024];
const std::function<void()>* body_ptr;
// barriers
struct Bar {
  int count = 0;
  std::vector<int> waiting;
};
std::vector<Bar> warp_bars;
Bar block_bar;
// per-warp slots
struct Slot {
  const unsigned char* p;
  uint32_t a[4];
  uint32_t b0, b1;
  float c[4];
  float v;
};
std::vector<Slot> slots;

void yield() {
  swapcontext(&threads[cur].ctx, &sched);
}

int alive_in_warp(int w) {
  int n = 0;
  for (int l = 0; l < 32; ++l) {
    size_t i = w * 32 + l;
    if (i < threads.size() && threads[i].state != 2) ++n;
  }
  return n;
}
int alive() {
  int n = 0;
  for (auto& t : threads) n += t.state != 2;
  return n;
}

void arrive(Bar& b, int needed) {
  b.count++;
  if (b.count == needed) {
    for (int i : b.waiting) threads[i].state = 0;
    b.waiting.clear();
    b.count = 0;
  } else {
    b.waiting.push_back(cur);
    threads[cur].state = 1;
    yield();
  }
}
void warp_sync() {
  int w = cur / 32;
  arrive(warp_bars[w], alive_in_warp(w));
}

void entry() {
  (*body_ptr)();
  threads[cur].state = 2;
  // an exited thread may complete a pending barrier
  int w = cur / 32;
  Bar& wb = warp_bars[w];
  if (wb.count > 0 && wb.count == alive_in_warp(w)) {
    for (int i : wb.waiting) threads[i].state = 0;
    wb.waiting.clear();
    wb.count = 0;
  }
  if (block_bar.count > 0 && block_bar.count == alive()) {
    for (int i : block_bar.waiting) threads[i].state = 0;
    block_bar.waiting.clear();
    block_bar.count = 0;
  }
}
}  // namespace

Idx& thread_idx() {
  return threads[cur].tid;
}
Idx& block_idx() {
  return bidx;
}
Idx& block_dim() {
  return bdim;
}
Idx& grid_dim() {
  return gdim;
}
unsigned char* smem() {
  return smem_buf;
}
void syncthreads() {
  arrive(block_bar, alive());
}

float shfl_xor(float v, int off) {
  const int lane = cur % 32, base = cur - lane;
  slots[cur].v = v;
  warp_sync();
  const float r = slots[base + (lane ^ off)].v;
  warp_sync();
  return r;
}

void ldsm_x4(uint32_t (&r)[4], const void* p, bool trans) {
  const int lane = cur % 32, base = cur - lane;
  slots[cur].p = static_cast<const unsigned char*>(p);
  warp_sync();
  const int g = lane >> 2, tg = lane & 3;
  for (int i = 0; i < 4; ++i) {
    uint16_t e0, e1;
    if (!trans) {
      const unsigned char* row = slots[base + 8 * i + g].p;
      std::memcpy(&e0, row + 4 * tg, 2);
      std::memcpy(&e1, row + 4 * tg + 2, 2);
    } else {
      std::memcpy(&e0, slots[base + 8 * i + 2 * tg].p + 2 * g, 2);
      std::memcpy(&e1, slots[base + 8 * i + 2 * tg + 1].p + 2 * g, 2);
    }
    r[i] = uint32_t(e0) | (uint32_t(e1) << 16);
  }
  warp_sync();
}

static float lo(uint32_t u) {
  return __uint_as_float(u << 16);
}
static float hi(uint32_t u) {
  return __uint_as_float(u & 0xffff0000u);
}

void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int lane = cur % 32, base = cur - lane;
  Slot& s = slots[cur];
  for (int i = 0; i < 4; ++i) s.a[i] = a[i], s.c[i] = c[i];
  s.b0 = b0, s.b1 = b1;
  warp_sync();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const Slot& q = slots[base + l];
    const int g = l >> 2, tg = l & 3;
    A[g][2 * tg] = lo(q.a[0]);
    A[g][2 * tg + 1] = hi(q.a[0]);
    A[g + 8][2 * tg] = lo(q.a[1]);
    A[g + 8][2 * tg + 1] = hi(q.a[1]);
    A[g][2 * tg + 8] = lo(q.a[2]);
    A[g][2 * tg + 9] = hi(q.a[2]);
    A[g + 8][2 * tg + 8] = lo(q.a[3]);
    A[g + 8][2 * tg + 9] = hi(q.a[3]);
    B[2 * tg][g] = lo(q.b0);
    B[2 * tg + 1][g] = hi(q.b0);
    B[2 * tg + 8][g] = lo(q.b1);
    B[2 * tg + 9][g] = hi(q.b1);
  }
  const int g = lane >> 2, tg = lane & 3;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * tg, 2 * tg + 1, 2 * tg, 2 * tg + 1};
  float out[4];
  for (int e = 0; e < 4; ++e) {
    float acc = c[e];
    for (int k = 0; k < 16; ++k) acc += A[rows[e]][k] * B[k][cols[e]];
    out[e] = acc;
  }
  warp_sync();
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}

void run_grid(dim3 grid, unsigned nthreads, const std::function<void()>& body) {
  body_ptr = &body;
  gdim = {grid.x, grid.y, grid.z};
  bdim = {nthreads, 1, 1};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        bidx = {x, y, z};
        std::memset(smem_buf, 0xff, sizeof(smem_buf));  // garbage, as on a GPU
        threads.assign(nthreads, Thread{});
        slots.assign(nthreads, Slot{});
        warp_bars.assign((nthreads + 31) / 32, Bar{});
        block_bar = Bar{};
        for (unsigned i = 0; i < nthreads; ++i) {
          Thread& t = threads[i];
          t.tid = {i, 0, 0};
          t.stack.resize(256 * 1024);
          getcontext(&t.ctx);
          t.ctx.uc_stack.ss_sp = t.stack.data();
          t.ctx.uc_stack.ss_size = t.stack.size();
          t.ctx.uc_link = &sched;
          makecontext(&t.ctx, entry, 0);
        }
        for (;;) {
          bool any = false, progressed = false;
          for (unsigned i = 0; i < nthreads; ++i) {
            if (threads[i].state == 2) continue;
            any = true;
            if (threads[i].state != 0) continue;
            cur = static_cast<int>(i);
            progressed = true;
            swapcontext(&sched, &threads[i].ctx);
          }
          if (!any) break;
          if (!progressed) {
            std::fprintf(stderr, "emu: deadlock in block %u %u %u\n", x, y, z);
            std::abort();
          }
        }
      }
}
}  // namespace emu
