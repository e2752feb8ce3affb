#!/bin/bash
set -euo pipefail
cd /app
cd photos
for file in *; do
    case "${file,,}" in
        *.jpg | *.jpeg)
            target="${file%.*}.jpg"
            if [ "$file" != "$target" ]; then mv -- "$file" "$target"; fi
            ;;
    esac
done
