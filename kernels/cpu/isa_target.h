// Internal: regions of a translation unit compiled for extra ISA extensions.
//
// CASCADE_TARGET_BEGIN("isa,...") ... CASCADE_TARGET_END(): every function defined in
// between is compiled for those extensions (gcc: a target pragma; clang, which ignores that
// pragma: the same target attribute applied to every function of the region).
//
// Contract: open a region only after every other include of the file, so that the inline
// functions of shared headers stay baseline code (the linker keeps one copy of an inline
// function, and an AVX2-only CPU must never be handed an AVX-512 copy of one); include
// headers inside a region only when they hold templates or internal-linkage code written
// for it (gemm_lanes.h, quant_lanes.h). Code in a region runs only after run-time
// detection (cpu_features.h) found those extensions.
#ifndef CASCADE_KERNELS_CPU_ISA_TARGET_H_
#define CASCADE_KERNELS_CPU_ISA_TARGET_H_

// The inner loops' helpers are inlined whatever the compiler's size heuristics say: a call
// there spills every live vector register (all are call-clobbered) and clears the upper
// halves (vzeroupper).
#define CASCADE_HOT inline __attribute__((always_inline))

// gcc 12 reports its own AVX-512 intrinsics (unpack, shifts, inserts, gathers: those whose
// header passes an undefined vector as the unused merge source) as reading uninitialized
// values wherever they are inlined (GCC bug 105593, fixed in gcc 13). Silenced in the
// kernel files that include this header.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define CASCADE_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define CASCADE_TARGET_BEGIN(isa) \
  CASCADE_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define CASCADE_TARGET_END() CASCADE_PRAGMA(clang attribute pop)
#else
#define CASCADE_TARGET_BEGIN(isa) CASCADE_PRAGMA(GCC push_options) CASCADE_PRAGMA(GCC target(isa))
#define CASCADE_TARGET_END() CASCADE_PRAGMA(GCC pop_options)
#endif

#endif  // CASCADE_KERNELS_CPU_ISA_TARGET_H_
