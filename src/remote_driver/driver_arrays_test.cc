// The arrays family on the driver backend, on a real GPU (label gpu; skipped where no usable CUDA
// driver is found): arrays and pitched memory round trips through cuMemcpy3DAsync, byte-exact,
// texture and surface objects made from the session's arrays, mipmapped-array levels, and a
// session destroyed with everything still held.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "remote_driver/driver_backend.h"

namespace flyt::remote {
namespace {

class DriverArraysGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = MakeDriverBackend({});
    if (!backend.ok()) GTEST_SKIP() << "no usable CUDA driver here: " << backend.status().message();
    backend_ = std::move(backend).value();
    auto session = backend_->OpenSession("driver_arrays_test");
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    session_ = std::move(session).value();
  }
  static Session::ArraySpec Float4(uint64_t w, uint64_t h, uint64_t d = 0, uint32_t flags = 0) {
    Session::ArraySpec s;
    s.format = 2;
    for (int32_t& b : s.bits) b = 32;
    s.width = w;
    s.height = h;
    s.depth = d;
    s.flags = flags;
    return s;
  }
  static Session::CopyEndSpec Host(std::byte* p, uint64_t pitch, uint64_t height) {
    Session::CopyEndSpec e;
    e.kind = Session::CopyEndSpec::Kind::kHost;
    e.host = p;
    e.pitch = pitch;
    e.height = height;
    return e;
  }
  static Session::CopyEndSpec Array(uint64_t a) {
    Session::CopyEndSpec e;
    e.kind = Session::CopyEndSpec::Kind::kArray;
    e.array = a;
    return e;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Session> session_;
};

TEST_F(DriverArraysGpuTest, ArrayAndPitchedRoundTripsAreByteExact) {
  auto array = session_->ArrayCreate(Float4(37, 5));
  ASSERT_TRUE(array.ok()) << array.status().ToString();
  std::vector<std::byte> in(37 * 16 * 5), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::byte>(i * 13 + 7);
  Session::Copy3DSpec up{Array(*array), Host(in.data(), 37 * 16, 5), 37 * 16, 5, 1};
  ASSERT_TRUE(session_->Memcpy3D(up, kDefaultStream).ok());
  auto ptr = session_->Malloc(1024 * 5);
  ASSERT_TRUE(ptr.ok());
  Session::CopyEndSpec pitched;
  pitched.kind = Session::CopyEndSpec::Kind::kDevice;
  pitched.ptr = *ptr;
  pitched.pitch = 1024;
  pitched.height = 5;
  ASSERT_TRUE(session_->Memcpy3D({pitched, Array(*array), 37 * 16, 5, 1}, kDefaultStream).ok());
  ASSERT_TRUE(
      session_->Memcpy3D({Host(out.data(), 37 * 16, 5), pitched, 37 * 16, 5, 1}, kDefaultStream)
          .ok());
  EXPECT_EQ(in, out);
  ASSERT_TRUE(session_->ArrayDestroy(*array).ok());
  ASSERT_TRUE(session_->Free(*ptr).ok());
}

TEST_F(DriverArraysGpuTest, TextureSurfaceAndMipmapObjects) {
  auto array = session_->ArrayCreate(Float4(16, 16, 0, 0x02));
  ASSERT_TRUE(array.ok()) << array.status().ToString();
  Session::ResourceSpec res;
  res.type = 0;
  res.array = *array;
  Session::TextureSpec tex;
  tex.address_mode[0] = tex.address_mode[1] = 1;
  tex.normalized_coords = 1;
  auto t = session_->TextureCreate(res, tex, nullptr);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NE(*t, 0u);
  auto s = session_->SurfaceCreate(res);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(session_->TextureDestroy(*t).ok());
  EXPECT_TRUE(session_->SurfaceDestroy(*s).ok());
  auto mip = session_->MipmappedArrayCreate(Float4(64, 64), 4);
  ASSERT_TRUE(mip.ok()) << mip.status().ToString();
  auto level = session_->MipmappedArrayLevel(*mip, 3);
  ASSERT_TRUE(level.ok());
  std::vector<std::byte> in(8 * 8 * 16, std::byte{0x5a}), out(in.size());
  ASSERT_TRUE(session_->Memcpy3D({Array(*level), Host(in.data(), 128, 8), 128, 8, 1},
                                 kDefaultStream)
                  .ok());
  ASSERT_TRUE(session_->Memcpy3D({Host(out.data(), 128, 8), Array(*level), 128, 8, 1},
                                 kDefaultStream)
                  .ok());
  EXPECT_EQ(in, out);
  // Left held: the session's destruction releases the array, the mipmap and a texture.
  ASSERT_TRUE(session_->TextureCreate(res, tex, nullptr).ok());
  session_.reset();
}

}  // namespace
}  // namespace flyt::remote
