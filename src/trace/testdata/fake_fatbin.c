/* The mark of an nvcc-built program for the fake static build (trace_fake_static): a .nv_fatbin
 * section, which is what lets the tracer say its stripped copy runs CUDA but cannot be probed. */
__attribute__((section(".nv_fatbin"), used)) static const char fake_fatbin[16] = "fake fatbin";
