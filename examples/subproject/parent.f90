! SPDX-License-Identifier: MIT
! The Fortran parent program of examples/subproject: dependency('attn-fortran').
program parent_fortran
  use, intrinsic :: iso_c_binding
  use attn
  implicit none
  real(c_double), allocatable, target :: q(:, :), o(:, :)
  type(attn_sdpa_opts) :: opts
  type(attn_view) :: ov
  integer(c_int) :: st
  integer :: i
  allocate (q(4, 8), o(4, 8)) ! q(D, T): attn's (1, 1, T, D)
  q = reshape([(sin(0.3d0 * i), i = 1, 32)], [4, 8])
  opts%causal = ATTN_CAUSAL_TOP_LEFT
  ov = attn_view_of(o, 4)
  st = attn_sdpa(attn_view_of(q, 4), attn_view_of(q, 4), attn_view_of(q, 4), opts, ov, &
                 c_null_ptr, 0_c_size_t)
  ! the first query sees only the first key: its output is that key's value row
  if (st /= ATTN_OK .or. maxval(abs(o(:, 1) - q(:, 1))) > 1d-15) then
    print '(a, a)', 'attn_sdpa from the Fortran parent: ', attn_strerror(st)
    stop 1
  end if
  print '(a, a, a)', 'attn ', attn_version_string(), ' from a Fortran parent: ok'
end program parent_fortran
