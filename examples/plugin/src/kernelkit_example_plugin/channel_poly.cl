// com.example::ChannelPoly on the gpu device. Built with -D DEGREE=<n> -D RELU=<0|1>; one
// work-item per element; the channel of element i is (i / inner) % channels.
__kernel void channel_poly(const __global float* x, __global float* y, __constant float* coefficients,
                           __constant float* bias, const int channels, const int inner,
                           const float scale, const int x_offset)
{
    const size_t i = get_global_id(0);
    const float v = x[x_offset + i];
    float acc = coefficients[DEGREE];
    for (int k = DEGREE - 1; k >= 0; --k)
        acc = acc * v + coefficients[k];
    acc = acc * scale + bias[(i / inner) % channels];
#if RELU
    acc = isnan(acc) ? acc : fmax(acc, 0.0f);  /* NaN propagates, as np.maximum does */
#endif
    y[i] = acc;
}
