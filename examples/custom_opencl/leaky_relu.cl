// Leaky ReLU written against OpenVINO's custom-layer built-in defines: the host code generates
// INPUT0_TYPE, INPUT0_PITCHES, OUTPUT0_DIMS, ... before this file, and `neg_slope` from the op's
// `alpha` attribute (see leaky_relu.xml / leaky_relu.yml). One work-item per element, the global
// work size being (X, Y, B*F).
__kernel void leaky_relu(const __global INPUT0_TYPE* input0, __global OUTPUT0_TYPE* output)
{
    const uint x = get_global_id(0);
    const uint y = get_global_id(1);
    const uint bf = get_global_id(2);
    const uint feature = bf % OUTPUT0_DIMS[1];
    const uint batch = bf / OUTPUT0_DIMS[1];
    // pitches are in elements, not bytes
    const uint in_id = batch * INPUT0_PITCHES[0] + feature * INPUT0_PITCHES[1]
                     + y * INPUT0_PITCHES[2] + x * INPUT0_PITCHES[3] + INPUT0_OFFSET;
    const uint out_id = batch * OUTPUT0_PITCHES[0] + feature * OUTPUT0_PITCHES[1]
                      + y * OUTPUT0_PITCHES[2] + x * OUTPUT0_PITCHES[3] + OUTPUT0_OFFSET;
    const INPUT0_TYPE value = input0[in_id];
    output[out_id] = value < 0 ? value * (OUTPUT0_TYPE)neg_slope : value;
}
