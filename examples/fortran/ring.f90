! SPDX-License-Identifier: MIT
! Ring attention from Fortran (module attn_mpi, docs/fortran.md): each rank holds a block
! of one causal sequence, as a section of the whole arrays (no copies), and
! attn_ring_sdpa over MPI_COMM_WORLD gives every rank its rows of the attention over the
! whole sequence, checked against a naive Fortran loop (1e-12).
!
!   mpifort ring.f90 $(pkg-config --cflags --libs attn-fortran-mpi)
!   mpirun -np 2 ./a.out
program ring_fortran
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use attn
  use attn_mpi
  implicit none
  integer, parameter :: D = 8, Tr = 6, H = 2
  real(c_double), allocatable, target :: q(:, :, :), k(:, :, :), v(:, :, :), o(:, :, :)
  real(c_double), allocatable :: ref(:, :, :)
  type(attn_ring_opts) :: opts
  type(attn_view) :: ov
  real(c_double) :: err, worst
  integer(c_int) :: st
  integer :: rank, nranks, T, a, b, i, j, l

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  T = nranks * Tr
  allocate (q(D, T, H), k(D, T, H), v(D, T, H), o(D, T, H), ref(D, T, H))
  do l = 1, H ! the whole sequence, the same on every rank
    do j = 1, T
      do i = 1, D
        q(i, j, l) = sin(0.37d0 * i + 1.1d0 * j + 2.3d0 * l)
        k(i, j, l) = cos(0.71d0 * i - 0.4d0 * j + 1.3d0 * l)
        v(i, j, l) = sin(0.23d0 * i * j + 0.5d0 * l)
      end do
    end do
  end do
  a = rank * Tr + 1 ! this rank's tokens a..b (ATTN_RING_CONTIGUOUS)
  b = a + Tr - 1
  o = 0
  opts%causal = ATTN_CAUSAL_TOP_LEFT
  ov = attn_view_of(o(:, a:b, :), 4)
  st = attn_ring_sdpa(MPI_COMM_WORLD%MPI_VAL, attn_view_of(q(:, a:b, :), 4), &
                      attn_view_of(k(:, a:b, :), 4), attn_view_of(v(:, a:b, :), 4), opts, ov, &
                      c_null_ptr, 0_c_size_t)
  call naive(q, k, v, ref)
  err = huge(1d0)
  if (st == ATTN_OK) err = maxval(abs(o(:, a:b, :) - ref(:, a:b, :)))
  call MPI_Allreduce(err, worst, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
  if (rank == 0) then
    if (st /= ATTN_OK) print '(a, a)', 'attn_ring_sdpa: ', attn_strerror(st)
    print '(a, i0, a, es9.2, a)', 'ring_fortran: ', nranks, ' rank(s), max error ', worst, &
      merge(' <= 1e-12 ok    ', ' > 1e-12 FAILED ', worst <= 1d-12)
  end if
  call MPI_Finalize()
  if (worst > 1d-12) stop 1

contains

  ! softmax(q k^T / sqrt(D)) v over the keys j <= i, per head, in double
  subroutine naive(q, k, v, out)
    real(c_double), intent(in) :: q(:, :, :), k(:, :, :), v(:, :, :)
    real(c_double), intent(out) :: out(:, :, :)
    real(c_double) :: s(size(k, 2))
    integer :: h, i, j
    do h = 1, size(q, 3)
      do i = 1, size(q, 2)
        do j = 1, i
          s(j) = dot_product(q(:, i, h), k(:, j, h)) / sqrt(real(size(q, 1), c_double))
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

end program ring_fortran
