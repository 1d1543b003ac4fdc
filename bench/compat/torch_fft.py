"""cuFFT through PyTorch: fft2 / ifft2 of four 4096 x 4096 complex64 images, rfft2 / irfft2 and
a 1-D irfft along the rows, with the round trip's error. About 2 GiB (cuFFT plans' work areas
come from PyTorch's allocator). Hashes every transform."""
from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

torch = torch_setup()
gen = torch.Generator(device="cuda").manual_seed(7)
re = torch.randn(4, 4096, 4096, device="cuda", generator=gen)
im = torch.randn(4, 4096, 4096, device="cuda", generator=gen)
z = torch.complex(re, im)
del im
f = torch.fft.fft2(z)
back = torch.fft.ifft2(f)
err = (back - z).abs().max()
d = Digest().add(f, back)
del f, back, z
r = torch.fft.rfft2(re)
rb = torch.fft.irfft2(r, s=re.shape[-2:])
row = torch.fft.irfft(r[:, :, :1024], n=2046, dim=-1)
d.add(r, rb, row)
torch.cuda.synchronize()
d.value(tsum(r)).value(tsum(rb)).value(tsum(row)).value(err)
finish("torch_fft", d, torch_footprint_mib(), tol=1e-5, roundtrip_err=float(err))
