// A kernel named for the simulated device's fault injection (src/remote/sim_backend.h): its
// launch corrupts the device state as an illegal address would on a GPU. Server tests load it.
__global__ void flyt_sim_fault_store(int* bad) { *bad = 1; }
