// consumer: trains a small MLP on data of its own, through loom's installed package
// (examples/consumer/CMakeLists.txt). Two classes of points in the plane, inside the unit circle
// or not, in std::vectors -> io::ArrayDataset -> io::DataLoader -> nn::Trainer, captured as a
// graph and replayed. Prints the held-out accuracy before and after; exits 1 unless it passes 90%.
#include <cstdio>
#include <random>
#include <vector>

#include <loom/loom.h>

using namespace loom;

// n points in [-2, 2)^2, labelled 1 inside the unit circle.
std::shared_ptr<io::ArrayDataset> Circle(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int64_t i = 0; i < n; ++i) {
    const float a = u(gen), b = u(gen);
    x.insert(x.end(), {a, b});
    y.push_back(a * a + b * b < 1 ? 1 : 0);
  }
  return std::make_shared<io::ArrayDataset>(std::move(x), Shape{2}, std::move(y), "circle");
}

int main() try {
  std::printf("consumer: loom %s\n", LOOM_VERSION);
  auto dev = CpuDevice();
  dev->SetRandSeed(0);
  nn::LayerOptions lo;
  lo.device = dev;
  auto net = std::make_shared<nn::Sequential>();
  net->Add(std::make_shared<nn::Linear>(2, 32, true, lo));
  net->Add(nn::ReLU());
  net->Add(std::make_shared<nn::Linear>(32, 2, true, lo));
  nn::Model model(net, std::make_shared<nn::SGD>(0.1, 0.9));
  model.Compile({ops::Zeros({32, 2}, DType::kFloat32, dev)}, /*is_train=*/true, /*use_graph=*/true);

  io::DataLoaderOptions o;
  o.batch_size = 32;
  o.seed = 1;
  o.drop_last = true;  // a graph trains on batches of one shape
  o.device = dev;
  io::DataLoader train(Circle(1000, 1), o);
  o.shuffle = false;
  o.drop_last = false;
  o.batch_size = 250;
  io::DataLoader held_out(Circle(500, 2), o);

  nn::TrainerOptions t;
  t.epochs = 10;
  t.eval_at_start = true;
  t.verbose = t.progress = false;
  t.on_eval = [](int64_t step, double, const nn::EvalResult& r) {
    std::printf("consumer: step %3lld  held-out loss %.4f  top-1 %.1f%%\n", (long long)step, r.loss, 100 * r.top1);
  };
  nn::TrainResult r = nn::Trainer(model, train, &held_out, t).Fit();
  if (r.eval.top1 <= 0.9) {
    std::fprintf(stderr, "consumer: held-out accuracy %.3f did not pass 0.9\n", r.eval.top1);
    return 1;
  }
  return 0;
} catch (const loom::Error& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
