! SPDX-License-Identifier: MIT
! One encoder block forward from PyTorch-layout weights, checked against PyTorch
! (docs/fortran.md).
!
!   gfortran encoder.f90 $(pkg-config --cflags --libs attn-fortran)
!   ./a.out tests/data/layers_enc_post_gelu_causal.txt [more fixtures]
!
! Each fixture (scripts/gen_layer_fixtures.py: nn.TransformerEncoderLayer in float64,
! batch_first) holds x (B, T, C), the layer's parameters in PyTorch's own (out, in)
! layout and PyTorch's output. Read in file order into Fortran arrays, PyTorch's
! row-major (out, in) weight is Fortran's w(in, out), which attn_view_of shows as
! (out, in); attn_view_transpose makes it attn's (in, out) W of y = x W + b. No copy,
! no reordering. The block runs in f64 (1e-12 of PyTorch) and in f32 (1e-5).
! Exit status 0 when every fixture matches.
program encoder_fortran
  use, intrinsic :: iso_c_binding
  use attn
  implicit none

  type :: tensor_t
    character(len=32) :: name = ''
    integer :: ndim = 0
    integer :: shape(4) = 0 ! PyTorch's (row-major) shape
    real(c_double), allocatable :: f64(:)
    real(c_float), allocatable :: f32(:)
  end type tensor_t

  type(tensor_t), allocatable, target :: ts(:)
  integer :: meta_B, meta_T, meta_C, meta_H, meta_F, meta_relu, meta_norm_first, meta_pad, &
             meta_causal
  character(len=1024) :: path
  integer :: i, fails = 0

  if (command_argument_count() < 1) then
    print '(a)', 'usage: encoder_fortran layers_enc_<case>.txt ...'
    stop 2
  end if
  do i = 1, command_argument_count()
    call get_command_argument(i, path)
    call load(trim(path))
    call run(trim(path), ATTN_F64, 1d-12, fails)
    call run(trim(path), ATTN_F32, 1d-5, fails)
  end do
  if (fails /= 0) then
    print '(a, i0, a)', 'encoder_fortran: ', fails, ' case(s) FAILED'
    stop 1
  end if
  print '(a)', 'encoder_fortran: every block matches PyTorch'

contains

  ! The fixture format (scripts/fixture_io.py): "meta <key> <int>" lines, then
  ! "tensor <name> <ndim> <d0> .. <d{ndim-1}>" followed by the values, row-major.
  subroutine load(file)
    character(*), intent(in) :: file
    character(len=256) :: line, key
    integer :: u, ios, val, n
    type(tensor_t) :: t
    type(tensor_t), allocatable :: tmp(:)
    if (allocated(ts)) deallocate (ts)
    allocate (ts(0))
    meta_pad = 0; meta_causal = 0; meta_relu = 0; meta_norm_first = 0
    open (newunit=u, file=file, status='old', action='read', iostat=ios)
    if (ios /= 0) then
      print '(a, a)', 'cannot open ', file
      stop 2
    end if
    do
      read (u, '(a)', iostat=ios) line
      if (ios /= 0) exit
      if (line(1:5) == 'meta ') then
        read (line(6:), *) key, val
        select case (trim(key))
        case ('B'); meta_B = val
        case ('T'); meta_T = val
        case ('C'); meta_C = val
        case ('H'); meta_H = val
        case ('F'); meta_F = val
        case ('relu'); meta_relu = val
        case ('norm_first'); meta_norm_first = val
        case ('pad'); meta_pad = val
        case ('causal'); meta_causal = val
        end select
      else if (line(1:7) == 'tensor ') then
        t%shape = 1
        read (line(8:), *) t%name, t%ndim
        read (line(8:), *) t%name, t%ndim, t%shape(1:t%ndim)
        n = product(t%shape(1:t%ndim))
        if (allocated(t%f64)) deallocate (t%f64)
        allocate (t%f64(n))
        read (u, *) t%f64
        t%f32 = real(t%f64, c_float)
        tmp = [ts, t]
        call move_alloc(tmp, ts)
      end if
    end do
    close (u)
  end subroutine load

  integer function find(name) result(i)
    character(*), intent(in) :: name
    do i = 1, size(ts)
      if (ts(i)%name == name) return
    end do
    print '(a, a)', 'fixture has no tensor ', name
    stop 2
  end function find

  ! PyTorch tensor `name` as a view of dtype dt, through a Fortran array of its rank
  ! (dims reversed, so the view has PyTorch's shape); `weight` transposes an (out, in)
  ! weight into attn's (in, out).
  function view(name, dt, weight) result(v)
    character(*), intent(in) :: name
    integer(c_int), intent(in) :: dt
    logical, intent(in), optional :: weight
    type(attn_view) :: v
    real(c_double), pointer :: d2(:, :), d3(:, :, :)
    real(c_float), pointer :: s2(:, :), s3(:, :, :)
    integer :: i, s(4)
    integer(c_int) :: st
    i = find(name)
    s = ts(i)%shape
    select case (ts(i)%ndim)
    case (1)
      if (dt == ATTN_F64) v = attn_view_of(ts(i)%f64)
      if (dt == ATTN_F32) v = attn_view_of(ts(i)%f32)
    case (2) ! PyTorch (s1, s2) is Fortran (s2, s1)
      if (dt == ATTN_F64) then
        d2(1:s(2), 1:s(1)) => ts(i)%f64
        v = attn_view_of(d2)
      else
        s2(1:s(2), 1:s(1)) => ts(i)%f32
        v = attn_view_of(s2)
      end if
    case (3)
      if (dt == ATTN_F64) then
        d3(1:s(3), 1:s(2), 1:s(1)) => ts(i)%f64
        v = attn_view_of(d3)
      else
        s3(1:s(3), 1:s(2), 1:s(1)) => ts(i)%f32
        v = attn_view_of(s3)
      end if
    end select
    if (present(weight)) then
      if (weight) then
        st = attn_view_transpose(v, 0, 1, v)
        if (st /= ATTN_OK) print '(a, a)', 'transpose: ', attn_strerror(st)
      end if
    end if
  end function view

  subroutine run(file, dt, tol, fails)
    character(*), intent(in) :: file
    integer(c_int), intent(in) :: dt
    real(c_double), intent(in) :: tol
    integer, intent(inout) :: fails
    type(attn_encoder_config) :: cfg ! all-zero: the defaults
    type(attn_encoder_params) :: p
    type(attn_sdpa_opts) :: opts
    type(attn_view) :: x, out
    real(c_double), allocatable, target :: y64(:, :, :)
    real(c_float), allocatable, target :: y32(:, :, :)
    integer(c_int64_t), allocatable, target :: kv_len(:)
    real(c_double), allocatable :: want(:)
    real(c_double) :: err
    integer(c_int) :: st
    integer :: ik
    logical, parameter :: W = .true.

    cfg%mha%dtype = dt
    cfg%mha%d_model = meta_C
    cfg%mha%heads = meta_H
    cfg%mha%bias = .true.
    cfg%ffn%dtype = dt
    cfg%ffn%d_model = meta_C
    cfg%ffn%d_ff = meta_F
    cfg%ffn%act = merge(ATTN_ACT_RELU, ATTN_ACT_GELU_ERF, meta_relu /= 0)
    cfg%ffn%bias = .true.
    cfg%eps = 1d-5
    cfg%norm = merge(ATTN_PRE_NORM, ATTN_POST_NORM, meta_norm_first /= 0)
    cfg%ln_affine = .true.

    p%ln1_g = view('ln1_g', dt); p%ln1_b = view('ln1_b', dt)
    p%ln2_g = view('ln2_g', dt); p%ln2_b = view('ln2_b', dt)
    p%mha%wq = view('wq', dt, W); p%mha%wk = view('wk', dt, W)
    p%mha%wv = view('wv', dt, W); p%mha%wo = view('wo', dt, W)
    p%mha%bq = view('bq', dt); p%mha%bk = view('bk', dt)
    p%mha%bv = view('bv', dt); p%mha%bo = view('bo', dt)
    p%ffn%w1 = view('w1', dt, W); p%ffn%b1 = view('b1', dt)
    p%ffn%w2 = view('w2', dt, W); p%ffn%b2 = view('b2', dt)

    if (meta_causal /= 0) opts%causal = ATTN_CAUSAL_TOP_LEFT
    if (meta_pad /= 0) then ! PyTorch's key_padding_mask as valid keys per batch
      ik = find('kv_len')
      kv_len = int(ts(ik)%f64, c_int64_t)
      opts%kv_len = c_loc(kv_len)
    end if

    x = view('x', dt)
    if (dt == ATTN_F64) then
      allocate (y64(meta_C, meta_T, meta_B))
      y64 = -1
      out = attn_view_of(y64)
    else
      allocate (y32(meta_C, meta_T, meta_B))
      y32 = -1
      out = attn_view_of(y32)
    end if
    st = attn_encoder_forward(cfg, p, x, opts, out, work=c_null_ptr, work_size=0_c_size_t)
    if (st /= ATTN_OK) then
      print '(a, a, a)', file, ': attn_encoder_forward: ', attn_strerror(st)
      fails = fails + 1
      return
    end if
    want = ts(find('out'))%f64
    if (dt == ATTN_F64) then
      err = maxval(abs(reshape(y64, [size(y64)]) - want))
    else
      err = maxval(abs(real(reshape(y32, [size(y32)]), c_double) - want))
    end if
    if (err <= tol) then
      print '(a, a, a, es9.2, a, es8.1, a)', file, merge(' f64', ' f32', dt == ATTN_F64), &
        ': max error vs PyTorch ', err, ' <= ', tol, ' ok'
    else
      print '(a, a, a, es9.2, a, es8.1, a)', file, merge(' f64', ' f32', dt == ATTN_F64), &
        ': max error vs PyTorch ', err, ' > ', tol, ' FAILED'
      fails = fails + 1
    end if
  end subroutine run

end program encoder_fortran
