// Users' own data (loom.data, swig/python/loom/data.py): what Python's loom.data.DataLoader
// shares with C++'s io::DataLoader and nn::Trainer. The loader itself is Python (it calls a
// user's __getitem__); its order and its run state are C++'s, so a Python dataset is shuffled
// as a C++ ArrayDataset of the same samples would be, and resumes through the same checks
// (nn::LoaderFacts, bound with nn/trainer.h in io.i).

%inline %{
namespace loom_py {

// io::EpochOrder as the bytes of an int64 array (numpy.frombuffer reads them without a copy
// per element).
PyObject* epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch, int64_t shard_rank,
                      int64_t shard_world) {
  std::vector<int64_t> order = loom::io::EpochOrder(n, shuffle, seed, epoch, shard_rank, shard_world);
  PyObject* bytes = PyBytes_FromStringAndSize(reinterpret_cast<const char*>(order.data()),
                                              Py_ssize_t(order.size() * sizeof(int64_t)));
  if (!bytes) throw PythonError();
  return bytes;
}

// (epoch, index): the batch a run state's loader reads next (io::LoaderPosition).
PyObject* run_state_position(const loom::nn::RunState& s) {
  return Py_BuildValue("(LL)", (long long)s.position.epoch, (long long)s.position.index);
}

}  // namespace loom_py
%}
