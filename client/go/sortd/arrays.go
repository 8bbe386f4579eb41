package sortd

import (
	"encoding/binary"
	"fmt"
)

// PackU32 packs keys as sortd.proto's bytes fields carry them: 4 bytes
// each, little-endian, back to back.
func PackU32(keys []uint32) []byte {
	packed := make([]byte, 4*len(keys))
	for i, k := range keys {
		binary.LittleEndian.PutUint32(packed[4*i:], k)
	}
	return packed
}

// UnpackU32 reads packed little-endian uint32s (keys, or a permutation's
// indices); a length that is not a multiple of 4 is an error.
func UnpackU32(packed []byte) ([]uint32, error) {
	if len(packed)%4 != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of uint32s", len(packed))
	}
	out := make([]uint32, len(packed)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(packed[4*i:])
	}
	return out, nil
}
