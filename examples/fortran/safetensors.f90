! SPDX-License-Identifier: MIT
! A PyTorch nn.TransformerEncoder loaded from a safetensors file and run from Fortran
! (docs/fortran.md "Weights from PyTorch").
!
!   gfortran safetensors.f90 $(pkg-config --cflags --libs attn-fortran)
!   ./a.out model.safetensors io.safetensors heads relu|gelu post|pre [model io ...]
!
! model.safetensors is what safetensors.torch.save_file(model.state_dict(), path)
! writes for an nn.TransformerEncoder (batch_first, layers.<i>.* and a final norm.*);
! io.safetensors holds x (B, T, C) and PyTorch's output out (both written by
! scripts/gen_safetensors_fixtures.py). The program opens both files, binds each
! layer's weights with attn_encoder_params_from_torch (views into the mapped file:
! no copy, no transposition loop), runs the layers with one workspace, applies the
! final LayerNorm and compares with PyTorch: 1e-12 in f64, 1e-5 in f32.
! Exit status 0 when every model matches.
program safetensors_fortran
  use, intrinsic :: iso_c_binding
  use attn
  implicit none
  character(len=1024) :: model, io, heads, act, norm
  integer :: i, fails = 0

  if (command_argument_count() < 5 .or. mod(command_argument_count(), 5) /= 0) then
    print '(a)', 'usage: safetensors_fortran model.safetensors io.safetensors heads ' // &
      'relu|gelu post|pre ...'
    stop 2
  end if
  do i = 1, command_argument_count(), 5
    call get_command_argument(i, model)
    call get_command_argument(i + 1, io)
    call get_command_argument(i + 2, heads)
    call get_command_argument(i + 3, act)
    call get_command_argument(i + 4, norm)
    call run(trim(model), trim(io), heads, act == 'relu', norm == 'pre', fails)
  end do
  if (fails /= 0) then
    print '(a, i0, a)', 'safetensors_fortran: ', fails, ' model(s) FAILED'
    stop 1
  end if
  print '(a)', 'safetensors_fortran: every model matches PyTorch'

contains

  subroutine check(st, what)
    integer(c_int), intent(in) :: st
    character(*), intent(in) :: what
    if (st /= ATTN_OK) then
      print '(a, a, a)', what, ': ', attn_strerror(st)
      stop 1
    end if
  end subroutine check

  ! The view's n values as double precision (f32 or f64), in row-major order.
  function values(v) result(r)
    type(attn_view), intent(in) :: v
    real(c_double), allocatable :: r(:)
    real(c_double), pointer :: d(:)
    real(c_float), pointer :: s(:)
    integer :: n
    n = int(product(v%shape(1:v%ndim)))
    if (v%dtype == ATTN_F64) then
      call c_f_pointer(v%data, d, [n])
      r = d
    else
      call c_f_pointer(v%data, s, [n])
      r = real(s, c_double)
    end if
  end function values

  subroutine run(model, io, heads, relu, pre, fails)
    character(*), intent(in) :: model, io, heads
    logical, intent(in) :: relu, pre
    integer, intent(inout) :: fails
    type(c_ptr) :: f, fio
    type(attn_view) :: x, want, w1, g, b, ya, yb, y_in, y_out
    type(attn_encoder_config) :: cfg ! all-zero: the defaults
    type(attn_encoder_params) :: p
    real(c_double), allocatable, target :: a64(:, :, :), b64(:, :, :)
    real(c_float), allocatable, target :: a32(:, :, :), b32(:, :, :)
    integer(c_int8_t), allocatable, target :: work(:)
    integer(c_size_t) :: ws
    integer(c_int64_t) :: nB, nT, nC
    character(len=32) :: prefix
    real(c_double) :: err, tol
    integer(c_int) :: st
    integer :: l, h

    call check(attn_safetensors_open(model // c_null_char, f), model)
    call check(attn_safetensors_open(io // c_null_char, fio), io)
    call check(attn_safetensors_view(fio, 'x' // c_null_char, x), 'x')
    call check(attn_safetensors_view(fio, 'out' // c_null_char, want), 'out')
    call check(attn_safetensors_view(f, 'layers.0.linear1.weight' // c_null_char, w1), 'linear1')
    nB = x%shape(1); nT = x%shape(2); nC = x%shape(3)
    read (heads, *) h

    cfg%mha%dtype = x%dtype
    cfg%mha%d_model = nC
    cfg%mha%heads = h
    cfg%mha%bias = .true.
    cfg%ffn%dtype = x%dtype
    cfg%ffn%d_model = nC
    cfg%ffn%d_ff = w1%shape(1) ! linear1.weight is (F, C)
    cfg%ffn%act = merge(ATTN_ACT_RELU, ATTN_ACT_GELU_ERF, relu)
    cfg%ffn%bias = .true.
    cfg%eps = 1d-5
    cfg%norm = merge(ATTN_PRE_NORM, ATTN_POST_NORM, pre)
    cfg%ln_affine = .true.

    ! two (B, T, C) buffers, Fortran (C, T, B), that the layers alternate between
    if (x%dtype == ATTN_F64) then
      allocate (a64(nC, nT, nB), b64(nC, nT, nB))
      ya = attn_view_of(a64); yb = attn_view_of(b64)
      tol = 1d-12
    else
      allocate (a32(nC, nT, nB), b32(nC, nT, nB))
      ya = attn_view_of(a32); yb = attn_view_of(b32)
      tol = 1d-5
    end if
    ws = attn_encoder_workspace_size(cfg, x)
    allocate (work(ws + 64))

    y_in = x
    y_out = ya
    l = 0
    do
      write (prefix, '(a, i0, a)') 'layers.', l, '.'
      st = attn_encoder_params_from_torch(cfg, f, trim(prefix) // c_null_char, p)
      if (st == ATTN_ENOTFOUND .and. l > 0) exit ! the last layer was l - 1
      call check(st, trim(prefix))
      call check(attn_encoder_forward(cfg, p, y_in, out=y_out, work=c_loc(work), &
                                      work_size=ws), 'encoder layer')
      y_in = y_out
      if (mod(l, 2) == 0) then
        y_out = yb
      else
        y_out = ya
      end if
      l = l + 1
    end do
    call check(attn_safetensors_view(f, 'norm.weight' // c_null_char, g), 'norm.weight')
    call check(attn_safetensors_view(f, 'norm.bias' // c_null_char, b), 'norm.bias')
    call check(attn_layernorm(cfg%eps, y_in, g, b, y_out), 'final norm')

    err = maxval(abs(values(y_out) - values(want)) / (1 + abs(values(want))))
    print '(a, a, i0, a, es9.2)', model, ': ', l, ' layers + norm, max rel. error vs PyTorch ', err
    if (l < 1 .or. .not. (err <= tol)) fails = fails + 1
    call attn_safetensors_close(fio)
    call attn_safetensors_close(f)
  end subroutine run

end program safetensors_fortran
