# Cross-compiling strata for 64-bit Arm Linux (aarch64) on a Debian 12 x86-64 host with Debian's
# cross toolchain (g++-aarch64-linux-gnu) and arm64 multiarch packages; the test binaries run under
# qemu-aarch64-static. scripts/test_aarch64.sh installs all of it and uses this file:
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DSTRATA_NATIVE=OFF -DSTRATA_CUDA=OFF -DSTRATA_LAYERS_ONLY=ON
#
# Where the arm64 files are:
#   /usr/aarch64-linux-gnu      the cross toolchain's own sysroot (libc, libstdc++, libgomp)
#   /usr/lib/aarch64-linux-gnu  arm64 multiarch packages (libdnnl2, libgtest-dev, libhwy-dev,
#                               libxxhash-dev)
#   STRATA_AARCH64_EXTRA_ROOT   (default /opt/strata-aarch64) arm64 packages that cannot be
#                               co-installed next to their amd64 versions with dpkg, unpacked
#                               there as <root>/usr/...: libdnnl-dev (its dnnl_config.h differs
#                               between the architectures) and Open MPI with its libraries
#                               (libmunge2 is not Multi-Arch). See scripts/test_aarch64.sh.
#   /                           architecture-independent headers and CMake packages shared with
#                               the host (nlohmann-json, toml++, googletest's headers); arm64
#                               libraries are still only found in the multiarch folders because
#                               CMAKE_LIBRARY_ARCHITECTURE is aarch64-linux-gnu.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(NOT DEFINED STRATA_AARCH64_EXTRA_ROOT)
  if(DEFINED ENV{STRATA_AARCH64_EXTRA_ROOT})
    set(STRATA_AARCH64_EXTRA_ROOT $ENV{STRATA_AARCH64_EXTRA_ROOT})
  else()
    set(STRATA_AARCH64_EXTRA_ROOT /opt/strata-aarch64)
  endif()
endif()
set(STRATA_AARCH64_EXTRA_ROOT ${STRATA_AARCH64_EXTRA_ROOT} CACHE PATH
    "arm64 packages unpacked outside dpkg (libdnnl-dev, Open MPI)")
# try_compile projects (FindOpenMP, FindMPI's checks) read this toolchain file again.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES STRATA_AARCH64_EXTRA_ROOT)
set(_strata_extra_lib ${STRATA_AARCH64_EXTRA_ROOT}/usr/lib/aarch64-linux-gnu)

set(CMAKE_FIND_ROOT_PATH ${STRATA_AARCH64_EXTRA_ROOT} /usr/aarch64-linux-gnu
    /usr/lib/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # build tools (git, python) are the host's
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config: the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR}
    "${_strata_extra_lib}/pkgconfig:/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# The arm64 dnnl headers (unpacked libdnnl-dev:arm64) ahead of /usr/include, which the cross
# compiler also searches and where the amd64 libdnnl-dev's dnnl_config.h is (GPU runtime OCL
# there, NONE on arm64). Shared libraries unpacked there need to be found by the linker when it
# follows libmpi.so's own dependencies (libopen-pal, libpmix, libhwloc, ...).
set(CMAKE_CXX_FLAGS_INIT "-isystem ${STRATA_AARCH64_EXTRA_ROOT}/usr/include")
set(CMAKE_C_FLAGS_INIT "-isystem ${STRATA_AARCH64_EXTRA_ROOT}/usr/include")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${_strata_extra_lib}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,${_strata_extra_lib}")

# Open MPI for arm64 without its compiler wrapper: the host's mpicxx would report the amd64
# folders. Giving the libraries and include folders skips FindMPI's wrapper search; the MPI-2 C++
# bindings (libmpi_cxx) are not used by strata.
set(_strata_ompi ${_strata_extra_lib}/openmpi)
if(EXISTS ${_strata_ompi}/include/mpi.h)
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "")
  set(MPI_C_COMPILER_INCLUDE_DIRS "${_strata_ompi}/include;${_strata_ompi}/include/openmpi"
      CACHE STRING "")
  set(MPI_CXX_COMPILER_INCLUDE_DIRS "${_strata_ompi}/include;${_strata_ompi}/include/openmpi"
      CACHE STRING "")
  set(MPI_C_LIB_NAMES mpi CACHE STRING "")
  set(MPI_CXX_LIB_NAMES mpi CACHE STRING "")
  set(MPI_mpi_LIBRARY ${_strata_ompi}/lib/libmpi.so CACHE FILEPATH "")
endif()

# The test binaries run through qemu (CMake uses this for add_test, gtest discovery and
# try_run). The guest's library path: the cross toolchain's libc first, so that it matches the
# loader that -L gives (libc6:arm64 in /lib/aarch64-linux-gnu is another build, and the two
# together hang in pthread_create; scripts/test_aarch64.sh), then the unpacked packages, then
# the multiarch folder.
find_program(STRATA_QEMU_AARCH64 qemu-aarch64-static qemu-aarch64)
if(STRATA_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${STRATA_QEMU_AARCH64} -L /usr/aarch64-linux-gnu -E
      LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib:${_strata_extra_lib}:/usr/lib/aarch64-linux-gnu)
endif()
