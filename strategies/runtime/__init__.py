"""The TensorFlow mechanism under the strategies: coordinator, dispatcher, step tracing,
worker hooks, watchdog, PS accumulators, local buffers and push codecs. Most private
TensorFlow/tf_keras internals tf-hetero relies on are reached from this folder;
docs/TF_INTERNALS.md lists every one, with the few files outside it."""
