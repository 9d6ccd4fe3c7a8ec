// Copies a 4-D tensor between two memory formats. Both pitch sets are in BFYX order, in elements;
// meta = { B, F, Y, X, src pitches (4), dst pitches (4), src offset }.
__kernel void kk_custom_reorder(__global const T* src, __global T* dst, __global const int* meta)
{
    const size_t i = get_global_id(0);
    const size_t x = i % meta[3];
    size_t r = i / meta[3];
    const size_t y = r % meta[2];
    r /= meta[2];
    const size_t f = r % meta[1];
    const size_t b = r / meta[1];
    dst[b * meta[8] + f * meta[9] + y * meta[10] + x * meta[11]] =
        src[meta[12] + b * meta[4] + f * meta[5] + y * meta[6] + x * meta[7]];
}
