! SPDX-License-Identifier: MIT
! Module attn: attn's C API for Fortran 2008 (ISO_C_BINDING), docs/fortran.md.
!
!   use attn
!   real(real64), allocatable, target :: q(:,:,:), k(:,:,:), v(:,:,:), o(:,:,:)  ! (D, T, H)
!   type(attn_sdpa_opts) :: opts                 ! starts all-zero: the defaults
!   opts%causal = ATTN_CAUSAL_TOP_LEFT
!   st = attn_sdpa(attn_view_of(q, 4), attn_view_of(k, 4), attn_view_of(v, 4), opts, &
!                  ov, c_null_ptr, 0_c_size_t)     ! ov = attn_view_of(o, 4)
!   if (st /= ATTN_OK) print *, attn_strerror(st)
!
! Everything of the generated module attn_capi (fortran/attn_capi.f90: constants,
! bind(c) types, one interface per public C function with the C name) is public
! here, plus:
!   attn_view_of(a [, ndim])   a view of a real(c_float), real(c_double) or
!                              integer(c_int8_t) (U8 mask) array of rank 1 to 4, whole
!                              or any section (strided, reversed), without a copy.
!                              Fortran's column-major a(i, j, k, l) is attn's
!                              row-major (l, k, j, i): the dims come reversed. ndim
!                              (rank..4) adds leading extent-1 dims, e.g. q(D, T, H)
!                              as (1, H, T, D). A bad ndim gives a view with ndim 0,
!                              which every attn call refuses with ATTN_EINVAL.
!   attn_strerror(s), attn_status_name(s), attn_version_string()
!                              the C strings as Fortran character(:) values.
! The array must outlive the view and should have the TARGET (or POINTER)
! attribute, since attn reads and writes it through the view's address.
module attn
  use, intrinsic :: iso_c_binding
  use attn_capi
  implicit none
  ! public by default: everything of attn_capi is re-exported
  private :: make_view, from_c_string
  private :: view_f32_1, view_f32_2, view_f32_3, view_f32_4
  private :: view_f64_1, view_f64_2, view_f64_3, view_f64_4
  private :: view_u8_1, view_u8_2, view_u8_3, view_u8_4

  interface attn_view_of
    module procedure view_f32_1, view_f32_2, view_f32_3, view_f32_4
    module procedure view_f64_1, view_f64_2, view_f64_3, view_f64_4
    module procedure view_u8_1, view_u8_2, view_u8_3, view_u8_4
  end interface attn_view_of

contains

  ! The view of n Fortran dims with extents ext(1:n): p(0) is the address of the first
  ! element, p(d) that of the element one step along Fortran dim d (unused when
  ! ext(d) < 2). attn axis a (0-based) of an nd-dim view is Fortran dim nd - a when
  ! a >= nd - n; the first nd - n axes have extent 1.
  function make_view(dtype, esize, n, ext, p, ndim) result(v)
    integer(c_int), intent(in) :: dtype
    integer(c_intptr_t), intent(in) :: esize
    integer, intent(in) :: n
    integer(c_int64_t), intent(in) :: ext(n)
    type(c_ptr), intent(in) :: p(0:n)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    integer(c_int64_t) :: str(n), natural
    integer :: nd, d, a
    nd = n
    if (present(ndim)) nd = ndim
    v%dtype = dtype
    if (nd < n .or. nd > ATTN_MAX_DIMS) then
      v%ndim = 0 ! refused by every attn call (ATTN_EINVAL)
      return
    end if
    natural = 1
    do d = 1, n
      if (ext(d) >= 2) then
        str(d) = int((transfer(p(d), 0_c_intptr_t) - transfer(p(0), 0_c_intptr_t)) / esize, &
                     c_int64_t)
      else
        str(d) = natural ! any stride is right for an extent-1 dim; keep it tidy
      end if
      natural = abs(str(d)) * max(ext(d), 1_c_int64_t)
    end do
    v%ndim = int(nd, c_int)
    v%data = p(0)
    if (any(ext == 0)) v%data = c_null_ptr
    do a = 0, nd - 1
      if (a < nd - n) then
        v%shape(a + 1) = 1
        v%stride(a + 1) = natural
      else
        v%shape(a + 1) = ext(nd - a)
        v%stride(a + 1) = str(nd - a)
      end if
    end do
  end function make_view

  function view_f32_1(a, ndim) result(v)
    real(c_float), intent(in), target :: a(:)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:1)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2))
    end if
    v = make_view(ATTN_F32, 4_c_intptr_t, 1, shape(a, kind=c_int64_t), p, ndim)
  end function view_f32_1

  function view_f32_2(a, ndim) result(v)
    real(c_float), intent(in), target :: a(:, :)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:2)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1, 1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2, 1))
      if (size(a, 2) > 1) p(2) = c_loc(a(1, 2))
    end if
    v = make_view(ATTN_F32, 4_c_intptr_t, 2, shape(a, kind=c_int64_t), p, ndim)
  end function view_f32_2

  function view_f32_3(a, ndim) result(v)
    real(c_float), intent(in), target :: a(:, :, :)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:3)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1, 1, 1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2, 1, 1))
      if (size(a, 2) > 1) p(2) = c_loc(a(1, 2, 1))
      if (size(a, 3) > 1) p(3) = c_loc(a(1, 1, 2))
    end if
    v = make_view(ATTN_F32, 4_c_intptr_t, 3, shape(a, kind=c_int64_t), p, ndim)
  end function view_f32_3

  function view_f32_4(a, ndim) result(v)
    real(c_float), intent(in), target :: a(:, :, :, :)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:4)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1, 1, 1, 1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2, 1, 1, 1))
      if (size(a, 2) > 1) p(2) = c_loc(a(1, 2, 1, 1))
      if (size(a, 3) > 1) p(3) = c_loc(a(1, 1, 2, 1))
      if (size(a, 4) > 1) p(4) = c_loc(a(1, 1, 1, 2))
    end if
    v = make_view(ATTN_F32, 4_c_intptr_t, 4, shape(a, kind=c_int64_t), p, ndim)
  end function view_f32_4

  function view_f64_1(a, ndim) result(v)
    real(c_double), intent(in), target :: a(:)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:1)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2))
    end if
    v = make_view(ATTN_F64, 8_c_intptr_t, 1, shape(a, kind=c_int64_t), p, ndim)
  end function view_f64_1

  function view_f64_2(a, ndim) result(v)
    real(c_double), intent(in), target :: a(:, :)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:2)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1, 1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2, 1))
      if (size(a, 2) > 1) p(2) = c_loc(a(1, 2))
    end if
    v = make_view(ATTN_F64, 8_c_intptr_t, 2, shape(a, kind=c_int64_t), p, ndim)
  end function view_f64_2

  function view_f64_3(a, ndim) result(v)
    real(c_double), intent(in), target :: a(:, :, :)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:3)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1, 1, 1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2, 1, 1))
      if (size(a, 2) > 1) p(2) = c_loc(a(1, 2, 1))
      if (size(a, 3) > 1) p(3) = c_loc(a(1, 1, 2))
    end if
    v = make_view(ATTN_F64, 8_c_intptr_t, 3, shape(a, kind=c_int64_t), p, ndim)
  end function view_f64_3

  function view_f64_4(a, ndim) result(v)
    real(c_double), intent(in), target :: a(:, :, :, :)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:4)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1, 1, 1, 1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2, 1, 1, 1))
      if (size(a, 2) > 1) p(2) = c_loc(a(1, 2, 1, 1))
      if (size(a, 3) > 1) p(3) = c_loc(a(1, 1, 2, 1))
      if (size(a, 4) > 1) p(4) = c_loc(a(1, 1, 1, 2))
    end if
    v = make_view(ATTN_F64, 8_c_intptr_t, 4, shape(a, kind=c_int64_t), p, ndim)
  end function view_f64_4

  function view_u8_1(a, ndim) result(v)
    integer(c_int8_t), intent(in), target :: a(:)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:1)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2))
    end if
    v = make_view(ATTN_U8, 1_c_intptr_t, 1, shape(a, kind=c_int64_t), p, ndim)
  end function view_u8_1

  function view_u8_2(a, ndim) result(v)
    integer(c_int8_t), intent(in), target :: a(:, :)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:2)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1, 1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2, 1))
      if (size(a, 2) > 1) p(2) = c_loc(a(1, 2))
    end if
    v = make_view(ATTN_U8, 1_c_intptr_t, 2, shape(a, kind=c_int64_t), p, ndim)
  end function view_u8_2

  function view_u8_3(a, ndim) result(v)
    integer(c_int8_t), intent(in), target :: a(:, :, :)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:3)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1, 1, 1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2, 1, 1))
      if (size(a, 2) > 1) p(2) = c_loc(a(1, 2, 1))
      if (size(a, 3) > 1) p(3) = c_loc(a(1, 1, 2))
    end if
    v = make_view(ATTN_U8, 1_c_intptr_t, 3, shape(a, kind=c_int64_t), p, ndim)
  end function view_u8_3

  function view_u8_4(a, ndim) result(v)
    integer(c_int8_t), intent(in), target :: a(:, :, :, :)
    integer, intent(in), optional :: ndim
    type(attn_view) :: v
    type(c_ptr) :: p(0:4)
    p = c_null_ptr
    if (size(a) > 0) then
      p(0) = c_loc(a(1, 1, 1, 1))
      if (size(a, 1) > 1) p(1) = c_loc(a(2, 1, 1, 1))
      if (size(a, 2) > 1) p(2) = c_loc(a(1, 2, 1, 1))
      if (size(a, 3) > 1) p(3) = c_loc(a(1, 1, 2, 1))
      if (size(a, 4) > 1) p(4) = c_loc(a(1, 1, 1, 2))
    end if
    v = make_view(ATTN_U8, 1_c_intptr_t, 4, shape(a, kind=c_int64_t), p, ndim)
  end function view_u8_4

  ! A NUL-terminated C string (never NULL from attn) as a Fortran string.
  function from_c_string(s) result(str)
    type(c_ptr), intent(in) :: s
    character(len=:), allocatable :: str
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(s)) then
      str = ''
      return
    end if
    call c_f_pointer(s, chars, [huge(0)]) ! read up to the NUL only
    n = 0
    do while (chars(n + 1) /= c_null_char)
      n = n + 1
    end do
    allocate (character(len=n) :: str)
    do i = 1, n
      str(i:i) = chars(i)
    end do
  end function from_c_string

  !> attn_strerror(s) as a Fortran string, e.g. "shape mismatch".
  function attn_strerror(s) result(str)
    integer(c_int), intent(in) :: s
    character(len=:), allocatable :: str
    str = from_c_string(attn_strerror_c(s))
  end function attn_strerror

  !> attn_status_name(s) as a Fortran string, e.g. "ATTN_ESHAPE".
  function attn_status_name(s) result(str)
    integer(c_int), intent(in) :: s
    character(len=:), allocatable :: str
    str = from_c_string(attn_status_name_c(s))
  end function attn_status_name

  !> The library's version at run time, e.g. "0.1.0".
  function attn_version_string() result(str)
    character(len=:), allocatable :: str
    str = from_c_string(attn_version_string_c())
  end function attn_version_string

end module attn
