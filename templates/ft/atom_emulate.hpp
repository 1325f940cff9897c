#pragma once
// A matrix atom executed on the CPU exactly as its lane layout says: every lane
// of the wave publishes its fragments, then each lane rebuilds A and B as the
// instruction would see them and computes its own accumulator slots (exact
// products of the decoded operands, fp32 sums in k order). Operands decode with
// the atom row's own element type (Atom::elem: e4m3fnuz for the gfx942 fp8 rows,
// OCP e4m3 for gfx950 and sm_90a), so bytes of the other flavour come out wrong
// here as on hardware. A template that feeds an atom the wrong lanes likewise
// gets a wrong answer.
namespace ft::emu {

template <class Atom>
void emulate_mma(float (&c)[Atom::c_regs], const typename Atom::storage (&a)[Atom::a_regs],
                 const typename Atom::storage (&b)[Atom::b_regs]) {
  using S = typename Atom::storage;
  struct Fragments {
    S a[Atom::a_regs];
    S b[Atom::b_regs];
  };
  Fragments mine;
  __builtin_memcpy(mine.a, a, sizeof mine.a);
  __builtin_memcpy(mine.b, b, sizeof mine.b);
  Fragments all[Atom::lanes];
  wave_all_gather<Atom::lanes>(&mine, sizeof mine, all);

  float A[Atom::M][Atom::K];
  float B[Atom::N][Atom::K];
  for (int l = 0; l < Atom::lanes; ++l) {
    for (int i = 0; i < Atom::a_regs; ++i) A[Atom::a_row(l, i)][Atom::a_k(l, i)] = to_f32<Atom::elem>(all[l].a[i]);
    for (int i = 0; i < Atom::b_regs; ++i) B[Atom::b_col(l, i)][Atom::b_k(l, i)] = to_f32<Atom::elem>(all[l].b[i]);
  }
  const int lane = thread_index() % Atom::lanes;
  for (int i = 0; i < Atom::c_regs; ++i) {
    const int r = Atom::c_row(lane, i), n = Atom::c_col(lane, i);
    float acc = c[i];
    for (int k = 0; k < Atom::K; ++k) acc += A[r][k] * B[n][k];
    c[i] = acc;
  }
}

}  // namespace ft::emu
