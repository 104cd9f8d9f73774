! SPDX-License-Identifier: MIT
! attn_sdpa on Fortran arrays, checked against a naive Fortran loop (docs/fortran.md).
!
!   gfortran sdpa.f90 $(pkg-config --cflags --libs attn-fortran)
!
! Column-major q(D, T, H) is, without a copy, attn's row-major (H, T, D); attn_view_of(q, 4)
! adds the batch axis: (1, H, T, D). Cases: f64 causal on whole arrays (1e-12 of the
! loop), f32 causal on strided sections of larger arrays (1e-5), f64 causal with a
! workspace the program owns, the causal rule as an int8 keep mask keep(Tk, Tq), and a
! refused call (ATTN_EINVAL, output untouched).
! Exit status 0 when every case matches.
program sdpa_fortran
  use, intrinsic :: iso_c_binding
  use attn
  implicit none
  integer, parameter :: D = 16, T = 24, H = 3
  integer :: fails = 0

  call case_f64(fails)
  call case_f32_sections(fails)
  call case_f64_workspace(fails)
  call case_keep_mask(fails)
  call case_refused(fails)
  if (fails /= 0) then
    print '(a, i0, a)', 'sdpa_fortran: ', fails, ' case(s) FAILED'
    stop 1
  end if
  print '(a)', 'sdpa_fortran: all cases match the naive loop'

contains

  ! Deterministic inputs in [-1, 1]: no random state, the same on every compiler.
  subroutine fill(a, seed)
    real(c_double), intent(out) :: a(:, :, :)
    real(c_double), intent(in) :: seed
    integer :: i, j, l
    do l = 1, size(a, 3)
      do j = 1, size(a, 2)
        do i = 1, size(a, 1)
          a(i, j, l) = sin(seed + 0.731d0 * i + 1.37d0 * j + 2.09d0 * l) * cos(0.11d0 * i * j)
        end do
      end do
    end do
  end subroutine fill

  ! The reference: out(:, i, h) = sum_j softmax_j(scale q(:, i, h) . k(:, j, h)) v(:, j, h)
  ! over the keys j <= i (causal top-left), in double.
  subroutine naive(q, k, v, out)
    real(c_double), intent(in) :: q(:, :, :), k(:, :, :), v(:, :, :)
    real(c_double), intent(out) :: out(:, :, :)
    real(c_double) :: s(size(k, 2)), scale
    integer :: h, i, j
    scale = 1d0 / sqrt(real(size(q, 1), c_double))
    do h = 1, size(q, 3)
      do i = 1, size(q, 2)
        do j = 1, i
          s(j) = scale * dot_product(q(:, i, h), k(:, j, h))
        end do
        s(1:i) = exp(s(1:i) - maxval(s(1:i)))
        s(1:i) = s(1:i) / sum(s(1:i))
        out(:, i, h) = 0
        do j = 1, i
          out(:, i, h) = out(:, i, h) + s(j) * v(:, j, h)
        end do
      end do
    end do
  end subroutine naive

  subroutine report(name, err, tol, fails)
    character(*), intent(in) :: name
    real(c_double), intent(in) :: err, tol
    integer, intent(inout) :: fails
    if (err <= tol) then
      print '(a, a, es9.2, a, es8.1, a)', name, ': max error ', err, ' <= ', tol, ' ok'
    else
      print '(a, a, es9.2, a, es8.1, a)', name, ': max error ', err, ' > ', tol, ' FAILED'
      fails = fails + 1
    end if
  end subroutine report

  subroutine case_f64(fails)
    integer, intent(inout) :: fails
    real(c_double), allocatable, target :: q(:, :, :), k(:, :, :), v(:, :, :), o(:, :, :)
    real(c_double), allocatable :: ref(:, :, :)
    type(attn_sdpa_opts) :: opts ! all-zero: scale 1/sqrt(D), no mask
    type(attn_view) :: ov
    integer(c_int) :: st
    allocate (q(D, T, H), k(D, T, H), v(D, T, H), o(D, T, H), ref(D, T, H))
    call fill(q, 0.1d0); call fill(k, 0.7d0); call fill(v, 1.9d0)
    opts%causal = ATTN_CAUSAL_TOP_LEFT
    ov = attn_view_of(o, 4) ! (1, H, T, D)
    st = attn_sdpa(attn_view_of(q, 4), attn_view_of(k, 4), attn_view_of(v, 4), opts, ov, &
                   c_null_ptr, 0_c_size_t) ! NULL, 0: attn allocates for this call
    if (st /= ATTN_OK) then
      print '(a, a)', 'f64 attn_sdpa: ', attn_strerror(st)
      fails = fails + 1
      return
    end if
    call naive(q, k, v, ref)
    call report('f64 causal, whole arrays (D, T, H)', maxval(abs(o - ref)), 1d-12, fails)
  end subroutine case_f64

  ! f32 q, k, v as every other element along D, and reversed along T for v, of larger
  ! arrays: strided (and negative-stride) views, no copies.
  subroutine case_f32_sections(fails)
    integer, intent(inout) :: fails
    real(c_float), allocatable, target :: qb(:, :, :), kb(:, :, :), vb(:, :, :), ob(:, :, :)
    real(c_double), allocatable :: q(:, :, :), k(:, :, :), v(:, :, :), ref(:, :, :)
    type(attn_sdpa_opts) :: opts
    type(attn_view) :: ov
    integer(c_int) :: st
    allocate (qb(2 * D, T, H), kb(2 * D, T, H), vb(D, T, H), ob(D + 3, T, H))
    allocate (q(D, T, H), k(D, T, H), v(D, T, H), ref(D, T, H))
    call fill(q, 0.3d0); call fill(k, 1.1d0); call fill(v, 2.3d0)
    qb = 0; kb = 0; ob = -7
    qb(1:2 * D:2, :, :) = real(q, c_float)
    kb(2:2 * D:2, :, :) = real(k, c_float)
    vb(:, T:1:-1, :) = real(v, c_float)
    q = qb(1:2 * D:2, :, :); k = kb(2:2 * D:2, :, :); v = vb(:, T:1:-1, :) ! f32-rounded inputs
    opts%causal = ATTN_CAUSAL_TOP_LEFT
    ov = attn_view_of(ob(2:D + 1, :, :), 4)
    st = attn_sdpa(attn_view_of(qb(1:2 * D:2, :, :), 4), attn_view_of(kb(2:2 * D:2, :, :), 4), &
                   attn_view_of(vb(:, T:1:-1, :), 4), opts, ov, c_null_ptr, 0_c_size_t)
    if (st /= ATTN_OK) then
      print '(a, a)', 'f32 attn_sdpa: ', attn_strerror(st)
      fails = fails + 1
      return
    end if
    call naive(q, k, v, ref)
    call report('f32 causal, strided sections', &
                maxval(abs(real(ob(2:D + 1, :, :), c_double) - ref)), 1d-5, fails)
    if (maxval(abs(ob(1, :, :) + 7)) > 0 .or. maxval(abs(ob(D + 2:, :, :) + 7)) > 0) then
      print '(a)', 'f32 sections: attn wrote outside the output section FAILED'
      fails = fails + 1
    end if
  end subroutine case_f32_sections

  ! The workspace from the query, owned by the program (as a hot loop would reuse it).
  subroutine case_f64_workspace(fails)
    integer, intent(inout) :: fails
    real(c_double), allocatable, target :: q(:, :, :), k(:, :, :), v(:, :, :), o(:, :, :)
    real(c_double), allocatable, target :: work(:)
    real(c_double), allocatable :: ref(:, :, :)
    type(attn_sdpa_opts) :: opts
    type(attn_view) :: qv, kv, vv, ov
    integer(c_size_t) :: ws
    integer(c_int) :: st
    allocate (q(D, T, H), k(D, T, H), v(D, T, H), o(D, T, H), ref(D, T, H))
    call fill(q, 2.2d0); call fill(k, 0.4d0); call fill(v, 1.5d0)
    opts%causal = ATTN_CAUSAL_TOP_LEFT
    opts%algo = ATTN_ALGO_TILED
    opts%block_k = 8
    qv = attn_view_of(q, 4); kv = attn_view_of(k, 4); vv = attn_view_of(v, 4)
    ov = attn_view_of(o, 4)
    ws = attn_sdpa_workspace_size(qv, kv, vv, opts)
    allocate (work(max(1_c_size_t, (ws + 7) / 8)))
    st = attn_sdpa(qv, kv, vv, opts, ov, c_loc(work), ws)
    if (st /= ATTN_OK) then
      print '(a, a)', 'f64 tiled attn_sdpa: ', attn_strerror(st)
      fails = fails + 1
      return
    end if
    call naive(q, k, v, ref)
    call report('f64 causal, tiled, own workspace', maxval(abs(o - ref)), 1d-12, fails)
  end subroutine case_f64_workspace

  ! The causal rule spelled as a U8 keep mask: keep(j, i) = 1 when query i may see key j.
  ! Fortran's keep(Tk, Tq) is attn's (Tq, Tk), broadcast over batch and heads.
  subroutine case_keep_mask(fails)
    integer, intent(inout) :: fails
    real(c_double), allocatable, target :: q(:, :, :), k(:, :, :), v(:, :, :), o(:, :, :)
    integer(c_int8_t), allocatable, target :: keep(:, :)
    real(c_double), allocatable :: ref(:, :, :)
    type(attn_view), target :: kv
    type(attn_sdpa_opts) :: opts
    type(attn_view) :: ov
    integer(c_int) :: st
    integer :: i, j
    allocate (q(D, T, H), k(D, T, H), v(D, T, H), o(D, T, H), ref(D, T, H), keep(T, T))
    call fill(q, 1.2d0); call fill(k, 2.4d0); call fill(v, 0.6d0)
    do i = 1, T
      do j = 1, T
        keep(j, i) = merge(1_c_int8_t, 0_c_int8_t, j <= i)
      end do
    end do
    kv = attn_view_of(keep)
    opts%keep = c_loc(kv)
    ov = attn_view_of(o, 4)
    st = attn_sdpa(attn_view_of(q, 4), attn_view_of(k, 4), attn_view_of(v, 4), opts, ov, &
                   c_null_ptr, 0_c_size_t)
    if (st /= ATTN_OK) then
      print '(a, a)', 'keep mask attn_sdpa: ', attn_strerror(st)
      fails = fails + 1
      return
    end if
    call naive(q, k, v, ref)
    call report('f64 keep mask keep(Tk, Tq), int8', maxval(abs(o - ref)), 1d-12, fails)
  end subroutine case_keep_mask

  ! A view of the wrong rank (ndim 2 for a 3-D array) is refused; nothing is written.
  subroutine case_refused(fails)
    integer, intent(inout) :: fails
    real(c_double), allocatable, target :: q(:, :, :), o(:, :, :)
    type(attn_view) :: ov
    integer(c_int) :: st
    character(len=:), allocatable :: name
    allocate (q(D, T, H), o(D, T, H))
    call fill(q, 0.5d0)
    o = 42
    ov = attn_view_of(o, 4)
    st = attn_sdpa(attn_view_of(q, 2), attn_view_of(q, 4), attn_view_of(q, 4), out=ov, &
                   work=c_null_ptr, work_size=0_c_size_t) ! opts absent: NULL, the defaults
    name = attn_status_name(st)
    if (st == ATTN_EINVAL .and. maxval(abs(o - 42)) <= 0 .and. name == 'ATTN_EINVAL') then
      print '(a, a, a)', 'refused view: ', attn_strerror(st), ', output untouched ok'
    else
      print '(a, i0, a)', 'refused view: status ', st, ' FAILED'
      fails = fails + 1
    end if
  end subroutine case_refused

end program sdpa_fortran
