# Pinned llama.cpp acquisition.
#
# Machines reach only Debian's packages and the npm registry, so the pinned llama.cpp comes from the npm package
# node-llama-cpp@3.21.1, which ships llama.cpp's full git history as llama/gitRelease.bundle (commit 80fb11a).
# We `npm pack` the tarball, check its npm integrity (sha512), clone the bundle into a cache outside the repo and
# add it as a subdirectory. Incremental builds then never rebuild llama.cpp; ccache (when present) makes a fresh
# build directory cheap too.
#
# -DRESTCPP_LLAMA_DIR=<checkout> uses a user's own llama.cpp instead (also the way to CUDA: add -DGGML_CUDA=ON).

set(RESTCPP_LLAMA_DIR "" CACHE PATH "Use this llama.cpp checkout instead of the pinned one")
set(RESTCPP_NPM_PACKAGE "node-llama-cpp@3.21.1")
set(RESTCPP_LLAMA_COMMIT "80fb11ac73e66d89eae2c6a91d8a77428fa733ed")
# npm integrity sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg== in hex
set(RESTCPP_NPM_SHA512
    "13737412fd956b4c33c9dbd7605c0cf47bf2a34ecfa168edf13ffd18c738dc2bedf18915fcd53fb5852010c0b582b4cfbf6a3d3d18d08b41b759be4ffdac2232")

if (DEFINED ENV{RESTCPP_CACHE_DIR})
    set(_rest_cache_default "$ENV{RESTCPP_CACHE_DIR}")
elseif (DEFINED ENV{XDG_CACHE_HOME})
    set(_rest_cache_default "$ENV{XDG_CACHE_HOME}/rest.cpp")
else()
    set(_rest_cache_default "$ENV{HOME}/.cache/rest.cpp")
endif()
set(RESTCPP_CACHE_DIR "${_rest_cache_default}" CACHE PATH "Where the pinned llama.cpp source is cached")

function(rest_fail what todo)
    message(FATAL_ERROR "rest.cpp: ${what} -- ${todo}")
endfunction()

function(rest_fetch_pinned_llama out_dir)
    set(src "${RESTCPP_CACHE_DIR}/llama.cpp-80fb11a")
    if (EXISTS "${src}/CMakeLists.txt" AND EXISTS "${src}/include/llama.h")
        set(${out_dir} "${src}" PARENT_SCOPE)
        return()
    endif()
    find_program(NPM npm)
    find_program(GIT git)
    if (NOT NPM)
        rest_fail("npm not found, needed to fetch the pinned llama.cpp" "apt-get install npm, or pass -DRESTCPP_LLAMA_DIR=<llama.cpp checkout>")
    endif()
    if (NOT GIT)
        rest_fail("git not found" "apt-get install git")
    endif()
    set(dl "${RESTCPP_CACHE_DIR}/download")
    file(MAKE_DIRECTORY "${dl}")
    set(tgz "${dl}/node-llama-cpp-3.21.1.tgz")
    if (NOT EXISTS "${tgz}")
        message(STATUS "rest.cpp: fetching ${RESTCPP_NPM_PACKAGE} with npm pack (about 35 MB)")
        execute_process(COMMAND "${NPM}" pack "${RESTCPP_NPM_PACKAGE}" --silent
                        WORKING_DIRECTORY "${dl}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
        if (NOT rc EQUAL 0 OR NOT EXISTS "${tgz}")
            string(STRIP "${err}" err)
            rest_fail("npm pack ${RESTCPP_NPM_PACKAGE} failed (${err})" "check npm registry access, or pass -DRESTCPP_LLAMA_DIR=<llama.cpp checkout>")
        endif()
    endif()
    file(SHA512 "${tgz}" got)
    if (NOT got STREQUAL RESTCPP_NPM_SHA512)
        file(REMOVE "${tgz}")
        rest_fail("${tgz} failed its npm integrity check (sha512 ${got})" "the download was corrupt and has been removed; configure again")
    endif()
    execute_process(COMMAND ${CMAKE_COMMAND} -E tar xzf "${tgz}" package/llama/gitRelease.bundle
                    WORKING_DIRECTORY "${dl}" RESULT_VARIABLE rc)
    if (NOT rc EQUAL 0)
        rest_fail("could not unpack llama/gitRelease.bundle from ${tgz}" "remove ${dl} and configure again")
    endif()
    # Clone into a temp name and rename, so an interrupted clone never looks like a finished one.
    set(tmp "${src}.tmp")
    file(REMOVE_RECURSE "${tmp}")
    execute_process(COMMAND "${GIT}" -c advice.detachedHead=false clone --quiet "${dl}/package/llama/gitRelease.bundle" "${tmp}"
                    RESULT_VARIABLE rc ERROR_VARIABLE err)
    if (rc EQUAL 0)
        execute_process(COMMAND "${GIT}" -C "${tmp}" -c advice.detachedHead=false checkout --quiet "${RESTCPP_LLAMA_COMMIT}"
                        RESULT_VARIABLE rc ERROR_VARIABLE err)
    endif()
    if (NOT rc EQUAL 0)
        rest_fail("git clone of the llama.cpp bundle failed (${err})" "remove ${RESTCPP_CACHE_DIR} and configure again")
    endif()
    file(RENAME "${tmp}" "${src}")
    file(REMOVE_RECURSE "${dl}/package")
    set(${out_dir} "${src}" PARENT_SCOPE)
endfunction()

if (RESTCPP_LLAMA_DIR)
    if (NOT EXISTS "${RESTCPP_LLAMA_DIR}/include/llama.h")
        rest_fail("RESTCPP_LLAMA_DIR=${RESTCPP_LLAMA_DIR} is not a llama.cpp checkout (no include/llama.h)" "point it at the root of a llama.cpp source tree")
    endif()
    set(RESTCPP_LLAMA_SOURCE "${RESTCPP_LLAMA_DIR}")
else()
    rest_fetch_pinned_llama(RESTCPP_LLAMA_SOURCE)
endif()
message(STATUS "rest.cpp: llama.cpp from ${RESTCPP_LLAMA_SOURCE}")

# Only the libraries: libllama, ggml and the `common` helpers (its n-gram speculative decoders are our baselines).
set(LLAMA_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_TOOLS OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_SERVER OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_APP OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_COMMON ON CACHE BOOL "" FORCE)
set(LLAMA_OPENSSL OFF CACHE BOOL "" FORCE)
set(LLAMA_CURL OFF CACHE BOOL "" FORCE)
set(LLAMA_SUBPROCESS OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_IS_DEV OFF CACHE BOOL "" FORCE)
set(LLAMA_ALL_WARNINGS OFF CACHE BOOL "" FORCE)
set(GGML_NATIVE ON CACHE BOOL "")
# llama.cpp's RPC backend: `--rpc HOST:PORT,...` spreads a model over `rpc-server` processes on other hosts
# (docs/deployment.md). It costs one small library; the servers are llama.cpp's own tool, built into bin/.
option(RESTCPP_RPC "Build llama.cpp's RPC backend and rpc-server" ON)
set(GGML_RPC ${RESTCPP_RPC} CACHE BOOL "" FORCE)
set(BUILD_SHARED_LIBS OFF CACHE BOOL "" FORCE)
add_subdirectory("${RESTCPP_LLAMA_SOURCE}" "${CMAKE_BINARY_DIR}/llama.cpp" EXCLUDE_FROM_ALL)
# ggml's AMX kernels (Sapphire Rapids and later Xeons) are compiled in whenever -march=native finds AMX, and then
# hold every quantized weight. On an AMX cloud VM ("Intel(R) Xeon(R) Processor", 2 vCPUs) they die with SIGSEGV at
# the first matrix product (`ldtilecfg` in ggml_backend_amx_mul_mat) for any Q8_0 or Q4_0 model, plain decoding
# included; llama.cpp issue 20824 reports the same crash, open without a fix. So they are off unless asked for:
# the flags below come after ggml's -march=native and win. The AVX-512/VNNI kernels do the work instead.
option(RESTCPP_GGML_AMX "Let ggml use AMX tiles for quantized weights (crashes on some AMX VMs)" OFF)
if (NOT RESTCPP_GGML_AMX AND TARGET ggml-cpu AND NOT MSVC AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
    include(CheckCCompilerFlag)
    include(CheckCXXCompilerFlag)
    check_c_compiler_flag(-mno-amx-int8 RESTCPP_C_HAS_NO_AMX)  # GCC and Clang 11+ (older ones know no AMX at all)
    check_cxx_compiler_flag(-mno-amx-int8 RESTCPP_CXX_HAS_NO_AMX)
    if (RESTCPP_C_HAS_NO_AMX AND RESTCPP_CXX_HAS_NO_AMX)
        target_compile_options(ggml-cpu PRIVATE -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
    endif()
endif()
# llama.cpp builds rpc-server only with its tools (LLAMA_BUILD_TOOLS, off here: we need none of the others).
if (GGML_RPC AND TARGET ggml-rpc AND EXISTS "${RESTCPP_LLAMA_SOURCE}/tools/rpc/CMakeLists.txt")
    add_subdirectory("${RESTCPP_LLAMA_SOURCE}/tools/rpc" "${CMAKE_BINARY_DIR}/llama.cpp/tools/rpc-server")
    set_target_properties(ggml-rpc-server PROPERTIES OUTPUT_NAME rpc-server
                          RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
endif()
