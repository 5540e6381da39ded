"""Copies the mma flash attention sources into an emulation tree (argv[2]) from a checkout
(argv[1]): mma_tile.cuh's PTX primitives become calls into emu.cc (cp.async -> a synchronous
copy, ldmatrix and mma.sync -> their PTX-ISA semantics on the warp's 32 emulated lanes),
`kernel<<<...>>>(args)` becomes emu::launch(kernel, ..., args), and the dynamic shared memory
array becomes emu::smem(). Everything else is compiled exactly as written."""
import os
import re
import sys

src = os.path.join(sys.argv[1], 'src/kernels/cuda/')
dst = os.path.join(sys.argv[2], 'src/kernels/cuda/')
os.makedirs(dst, exist_ok=True)
def fn_replace(s, name, body):
    # replace the definition of function `name` (from its '__device__ __forceinline__' line to the first line '}')
    m = re.search(r'__device__ __forceinline__ [^\n]*\b' + name + r'\(', s)
    assert m, name
    end = s.index('\n}\n', m.start()) + 3
    return s[:m.start()] + body + '\n' + s[end:]
s = open(src + 'mma_tile.cuh').read()
s = fn_replace(s, 'smem_addr', 'inline uint32_t smem_addr(const void*) { return 0; }')
s = fn_replace(s, 'cp_async16', 'inline void cp_async16(void* dst, const void* src, bool valid) { if (valid) std::memcpy(dst, src, 16); else std::memset(dst, 0, 16); }')
s = fn_replace(s, 'cp_async4', 'inline void cp_async4(void* dst, const void* src, bool valid) { if (valid) std::memcpy(dst, src, 4); else std::memset(dst, 0, 4); }')
s = fn_replace(s, 'cp_async_commit', 'inline void cp_async_commit() {}')
s = fn_replace(s, 'cp_async_wait_all', 'inline void cp_async_wait_all() {}')
s = fn_replace(s, 'ldsm_x4', 'inline void ldsm_x4(uint32_t (&r)[4], const void* p) { ::emu::ldsm_x4(r, p, false); }')
s = fn_replace(s, 'ldsm_x4_trans', 'inline void ldsm_x4_trans(uint32_t (&r)[4], const void* p) { ::emu::ldsm_x4(r, p, true); }')
s = fn_replace(s, 'mma_bf16', 'inline void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { ::emu::mma(c, a, b0, b1); }')
s = fn_replace(s, 'pack_bf16', '''inline uint32_t pack_bf16(float lo, float hi) {
  auto r = [](float f) { uint32_t u = __float_as_uint(f); u += 0x7fffu + ((u >> 16) & 1u); return u >> 16; };
  return r(lo) | (r(hi) << 16);
}''')
assert 'asm' not in s, 'a PTX primitive of mma_tile.cuh has no emulation'
open(dst + 'mma_tile.cuh', 'w').write(s)
for f in ['flash_attention_mma_common.cuh', 'flash_attention_mma.cu', 'flash_attention_mma_bwd.cu']:
    s = open(src + f).read()
    s = re.sub(r'([\w:]+(?:<[^<>]*>)?)<<<(.*?)>>>\(', r'::emu::launch(\1, \2, ', s, flags=re.S)
    s = s.replace('extern __shared__ __align__(16) unsigned char smem_raw[];', 'unsigned char* smem_raw = ::emu::smem();')
    open(dst + f.replace('.cu', '.cc') if f.endswith('.cu') else dst + f, 'w').write(s)
