# Per-file ISA flags of the engine's kernel files, shared by the main build and the GPU check
# build (gpu/check): the engine is compiled for AVX + FMA + F16C, and each kernel file for the
# ISA it is chosen for at run time (model/matmul.cpp checks the CPU before calling it).
function(troupe_kernel_flags root)
  set_source_files_properties(${root}/model/matmul_avx2.cpp ${root}/model/matmul_x16_avx2.cpp
    ${root}/model/attention_avx2.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(${root}/model/matmul_avx512.cpp ${root}/model/matmul_x16_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni")
  # The AMX kernels (tile instructions, then AVX-512 for the scales): called only where
  # amx_support() says the CPU, the OS and Linux allow them (model/matmul_amx.cpp, plain flags).
  set_source_files_properties(${root}/model/matmul_amx_tiles.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mamx-tile;-mamx-int8")
  # attention_avx512.cpp enables AVX-512 VNNI for its q8 scorer alone (a target attribute).
  set_source_files_properties(${root}/model/attention_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq")
endfunction()
