// DataLoader augmentation (random crop with padding, horizontal flip) against a reference that
// pads, crops and mirrors each image by hand; determinism under a seed whatever the prefetching;
// position() and Seek().
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "io/dataset.h"

namespace loom {
namespace test {
namespace {

std::shared_ptr<io::ImageData> Images(int64_t n, int64_t c, int64_t h, int64_t w) {
  auto d = std::make_shared<io::ImageData>();
  d->n = n;
  d->channels = c;
  d->height = h;
  d->width = w;
  std::mt19937 gen(9);
  for (int64_t i = 0; i < n * c * h * w; ++i) d->images.push_back(uint8_t(gen() % 256));
  for (int64_t i = 0; i < n; ++i) d->labels.push_back(int32_t(i % 10));
  return d;
}

io::DataLoaderOptions Augmented(int prefetch) {
  io::DataLoaderOptions o;
  o.batch_size = 4;
  o.seed = 3;
  o.crop_padding = 2;
  o.hflip = true;
  o.augment_seed = 17;
  o.prefetch = prefetch;
  return o;
}

std::vector<io::HostBatch> Epochs(io::DataLoader& l, int epochs) {
  std::vector<io::HostBatch> out;
  io::HostBatch b;
  for (int e = 0; e < epochs; ++e)
    while (l.NextHost(&b)) out.push_back(b);
  return out;
}

TEST(Augment, MatchesAHandMadePadCropAndFlip) {
  auto data = Images(6, 2, 5, 7);
  io::DataLoaderOptions o = Augmented(0);
  o.shuffle = false;
  o.batch_size = 6;
  io::DataLoader loader(data, o);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    io::HostBatch b;
    ASSERT_TRUE(loader.NextHost(&b));
    for (int64_t s = 0; s < 6; ++s) {
      io::AugmentDraw d = io::DrawAugment(17, epoch, s, 2, true);
      for (int64_t c = 0; c < 2; ++c) {
        // Pad by 2 with zeros, keep the 5x7 window at (dy, dx), mirror it when flipped.
        std::vector<int> padded(9 * 11, 0);
        for (int64_t h = 0; h < 5; ++h)
          for (int64_t w = 0; w < 7; ++w)
            padded[size_t((h + 2) * 11 + w + 2)] = data->images[size_t(((s * 2 + c) * 5 + h) * 7 + w)];
        for (int64_t h = 0; h < 5; ++h)
          for (int64_t w = 0; w < 7; ++w) {
            int64_t cw = d.flip ? 6 - w : w;
            float want = float(padded[size_t((h + d.dy) * 11 + cw + d.dx)]) * (1.0f / 255.0f);
            ASSERT_EQ(b.x[size_t(((s * 2 + c) * 5 + h) * 7 + w)], want)
                << "epoch " << epoch << " sample " << s << " c " << c << " h " << h << " w " << w;
          }
      }
    }
    ASSERT_FALSE(loader.NextHost(&b));
  }
}

TEST(Augment, DrawsCoverEveryOffsetAndFlipAboutHalf) {
  std::set<int64_t> dys, dxs;
  int flips = 0;
  for (int64_t s = 0; s < 400; ++s) {
    io::AugmentDraw d = io::DrawAugment(5, 1, s, 4, true);
    dys.insert(d.dy);
    dxs.insert(d.dx);
    flips += d.flip;
    EXPECT_FALSE(io::DrawAugment(5, 1, s, 4, false).flip);
  }
  EXPECT_EQ(dys.size(), 9u);
  EXPECT_EQ(dxs.size(), 9u);
  EXPECT_EQ(*dys.begin(), 0);
  EXPECT_EQ(*dys.rbegin(), 8);
  EXPECT_GT(flips, 140);
  EXPECT_LT(flips, 260);
}

TEST(Augment, DeterministicUnderASeedWhateverThePrefetching) {
  auto data = Images(22, 3, 6, 6);
  io::DataLoader a(data, Augmented(2)), b(data, Augmented(0));
  auto ea = Epochs(a, 3), eb = Epochs(b, 3);
  ASSERT_EQ(ea.size(), eb.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    EXPECT_EQ(ea[i].x, eb[i].x) << "batch " << i;
    EXPECT_EQ(ea[i].y, eb[i].y) << "batch " << i;
  }
  // Another augment seed augments differently, the same shuffling.
  io::DataLoaderOptions o = Augmented(2);
  o.augment_seed = 18;
  io::DataLoader c(data, o);
  auto ec = Epochs(c, 1);
  EXPECT_EQ(ec[0].y, ea[0].y);
  EXPECT_NE(ec[0].x, ea[0].x);
  // Epochs differ from one another: the same sample is cropped anew.
  o = Augmented(0);
  o.shuffle = false;
  io::DataLoader d(data, o);
  auto ed = Epochs(d, 2);
  EXPECT_NE(ed[0].x, ed[ed.size() / 2].x);
}

TEST(Augment, NeedsImagesNotFlatRows) {
  io::DataLoaderOptions o = Augmented(0);
  o.flat = true;
  EXPECT_THROW(io::DataLoader(Images(4, 1, 4, 4), o), ValueError);
  o = Augmented(0);
  o.crop_padding = -1;
  EXPECT_THROW(io::DataLoader(Images(4, 1, 4, 4), o), ValueError);
}

TEST(LoaderPosition, SeekResumesTheSameBatchesAsReadingOn) {
  auto data = Images(22, 1, 4, 4);  // batches of 4: 6 an epoch, the last of 2
  for (int prefetch : {0, 2}) {
    io::DataLoader whole(data, Augmented(prefetch));
    auto all = Epochs(whole, 3);  // 18 batches
    ASSERT_EQ(all.size(), 18u);
    EXPECT_EQ(whole.position().epoch, 3);
    EXPECT_EQ(whole.position().index, 0);
    io::DataLoader l(data, Augmented(prefetch));
    io::HostBatch b;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(l.NextHost(&b));
    EXPECT_EQ(l.position().epoch, 0);
    EXPECT_EQ(l.position().index, 3);
    l.Seek(1, 4);  // batch 10 of the three epochs
    ASSERT_TRUE(l.NextHost(&b));
    EXPECT_EQ(b.x, all[10].x);
    ASSERT_TRUE(l.NextHost(&b));
    EXPECT_EQ(b.x, all[11].x);
    EXPECT_EQ(l.position().index, 6);
    EXPECT_FALSE(l.NextHost(&b));  // the end of epoch 1
    EXPECT_EQ(l.position().epoch, 2);
    EXPECT_EQ(l.position().index, 0);
    ASSERT_TRUE(l.NextHost(&b));
    EXPECT_EQ(b.x, all[12].x);
    l.Seek(0, 6);  // at the end of epoch 0
    EXPECT_FALSE(l.NextHost(&b));
    ASSERT_TRUE(l.NextHost(&b));
    EXPECT_EQ(b.x, all[6].x);
    EXPECT_THROW(l.Seek(0, 7), ValueError);
    EXPECT_THROW(l.Seek(-1, 0), ValueError);
  }
}

TEST(LoaderPosition, SeekForgetsAFailedBatch) {
  io::DataLoaderOptions o = Augmented(2);
  o.transform = [](io::HostBatch& b) {
    if (b.epoch == 0 && b.index == 1) throw IOError("bad batch");
  };
  io::DataLoader l(Images(12, 1, 4, 4), o);
  io::HostBatch b;
  ASSERT_TRUE(l.NextHost(&b));
  EXPECT_THROW(l.NextHost(&b), IOError);
  EXPECT_THROW(l.NextHost(&b), IOError);
  l.Seek(0, 2);
  ASSERT_TRUE(l.NextHost(&b));
  EXPECT_EQ(b.index, 2);
}

}  // namespace
}  // namespace test
}  // namespace loom
